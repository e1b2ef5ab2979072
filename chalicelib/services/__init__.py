"""What operations, tasks and stages share: ownership checks, putting work on its queue, indexing. Imports
the ports and the domain, never an operation, a task or a stage."""
