"""Pure domain: types, status values, error codes, file types, config merge. No I/O, no AWS."""
