/* Native hot paths of the chunker: protected-span scan, separator units, semantic overlap, greedy merge
 * and the token-measure glue. Each function mirrors its pure-Python twin in spans.py / recursive.py /
 * lengths.py exactly (the differential tests compare both); all offsets are code points. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h> /* baseline on x86-64: no -m flags needed */
#endif

#define HARD_CAP 7500

typedef Py_ssize_t Ix;

/* ------------------------------------------------------------------ text access */

/* `b` is a one-byte view of the text: ASCII runes as themselves, every other rune as 0x80. All the
 * patterns look for ASCII only, so scanning it (memchr) is exact; CH reads the real rune when needed. */
typedef struct {
    int kind;
    const void *data;
    Ix n;
    const uint8_t *b;
    uint8_t *owned; /* b when it had to be built */
} Text;

static int text_init(Text *t, PyObject *s) {
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "text must be str");
        return -1;
    }
    t->kind = PyUnicode_KIND(s);
    t->data = PyUnicode_DATA(s);
    t->n = PyUnicode_GET_LENGTH(s);
    t->b = NULL;
    t->owned = NULL;
    return 0;
}

static int text_view(Text *t, PyObject *s) {
    if (PyUnicode_IS_ASCII(s)) {
        t->b = (const uint8_t *)t->data;
        return 0;
    }
    uint8_t *b = (uint8_t *)PyMem_Malloc((size_t)(t->n ? t->n : 1));
    if (!b) {
        PyErr_NoMemory();
        return -1;
    }
    Ix n = t->n, i = 0;
    if (t->kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *d = (const Py_UCS1 *)t->data;
#if defined(__SSE2__)
        const __m128i hi = _mm_set1_epi8((char)0x80);
        for (; i + 16 <= n; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(d + i));
            __m128i neg = _mm_cmplt_epi8(v, _mm_setzero_si128()); /* rune >= 128 */
            _mm_storeu_si128((__m128i *)(b + i), _mm_or_si128(_mm_andnot_si128(neg, v), _mm_and_si128(neg, hi)));
        }
#endif
        for (; i < n; i++) b[i] = d[i] < 128 ? d[i] : 0x80;
    } else if (t->kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *d = (const Py_UCS2 *)t->data;
#if defined(__SSE2__)
        const __m128i lim = _mm_set1_epi16(0x7F), hi = _mm_set1_epi16(0x80), z = _mm_setzero_si128();
        for (; i + 16 <= n; i += 16) {
            __m128i v0 = _mm_loadu_si128((const __m128i *)(d + i));
            __m128i v1 = _mm_loadu_si128((const __m128i *)(d + i + 8));
            __m128i a0 = _mm_cmpeq_epi16(_mm_subs_epu16(v0, lim), z); /* rune < 128 */
            __m128i a1 = _mm_cmpeq_epi16(_mm_subs_epu16(v1, lim), z);
            v0 = _mm_or_si128(_mm_and_si128(a0, v0), _mm_andnot_si128(a0, hi));
            v1 = _mm_or_si128(_mm_and_si128(a1, v1), _mm_andnot_si128(a1, hi));
            _mm_storeu_si128((__m128i *)(b + i), _mm_packus_epi16(v0, v1));
        }
#endif
        for (; i < n; i++) b[i] = d[i] < 128 ? (uint8_t)d[i] : 0x80;
    } else {
        const Py_UCS4 *d = (const Py_UCS4 *)t->data;
#if defined(__SSE2__)
        const __m128i lim = _mm_set1_epi32(128), hi = _mm_set1_epi32(0x80);
        for (; i + 16 <= n; i += 16) {
            __m128i w[4];
            for (int q = 0; q < 4; q++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(d + i + 4 * q));
                __m128i a = _mm_cmplt_epi32(v, lim); /* code points are < 0x110000: signed compare is fine */
                w[q] = _mm_or_si128(_mm_and_si128(a, v), _mm_andnot_si128(a, hi));
            }
            __m128i h0 = _mm_packs_epi32(w[0], w[1]), h1 = _mm_packs_epi32(w[2], w[3]);
            _mm_storeu_si128((__m128i *)(b + i), _mm_packus_epi16(h0, h1));
        }
#endif
        for (; i < n; i++) b[i] = d[i] < 128 ? (uint8_t)d[i] : 0x80;
    }
    t->b = b;
    t->owned = b;
    return 0;
}

static void text_free(Text *t) {
    PyMem_Free(t->owned);
    t->owned = NULL;
    t->b = NULL;
}

static inline Py_UCS4 CH(const Text *t, Ix i) { return PyUnicode_READ(t->kind, t->data, i); }
#define BY(t, i) ((Py_UCS4)(t)->b[(i)])

/* First index of c in [from, to), else -1. */
static Ix find_ch(const Text *t, Py_UCS4 c, Ix from, Ix to) {
    if (from < 0) from = 0;
    if (to > t->n) to = t->n;
    if (from >= to) return -1;
    const uint8_t *b = t->b;
    uint8_t key = c < 128 ? (uint8_t)c : 0x80;
    for (;;) {
        const void *r = memchr(b + from, key, (size_t)(to - from));
        if (!r) return -1;
        Ix i = (Ix)((const uint8_t *)r - b);
        if (c < 128 || CH(t, i) == c) return i;
        from = i + 1;
        if (from >= to) return -1;
    }
}

/* Last index of the ASCII rune c in [from, to), else -1. */
static Ix rfind_ch(const Text *t, Py_UCS4 c, Ix from, Ix to) {
    if (from < 0) from = 0;
    if (to > t->n) to = t->n;
    for (Ix i = to - 1; i >= from; i--)
        if (t->b[i] == c) return i;
    return -1;
}

/* First index of needle (m code points) lying entirely inside [from, to), else -1. */
static Ix find_str(const Text *t, const Py_UCS4 *nd, Ix m, Ix from, Ix to) {
    if (to > t->n) to = t->n;
    if (m <= 0) return -1;
    Ix last = to - m;
    Ix i = from;
    while (i <= last) {
        i = find_ch(t, nd[0], i, last + 1);
        if (i < 0) return -1;
        Ix k = 1;
        while (k < m && (nd[k] < 128 ? BY(t, i + k) == nd[k] : CH(t, i + k) == nd[k])) k++;
        if (k == m) return i;
        i++;
    }
    return -1;
}

/* ------------------------------------------------------------------ growable arrays */

typedef struct {
    Ix *v;
    Ix n, cap;
} IxVec;

static int vec_push(IxVec *a, Ix x) {
    if (a->n == a->cap) {
        Ix cap = a->cap ? a->cap * 2 : 64;
        Ix *v = (Ix *)PyMem_Realloc(a->v, (size_t)cap * sizeof(Ix));
        if (!v) {
            PyErr_NoMemory();
            return -1;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static void vec_free(IxVec *a) {
    PyMem_Free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

/* bisect.bisect_right / bisect_left over v[lo:hi], for each element type the scanner indexes */
#define DEFINE_BISECT(right, left, T)                                   \
    static Ix right(const T *v, T x, Ix lo, Ix hi) {                    \
        while (lo < hi) {                                               \
            Ix mid = lo + (hi - lo) / 2;                                \
            if (x < v[mid])                                             \
                hi = mid;                                               \
            else                                                        \
                lo = mid + 1;                                           \
        }                                                               \
        return lo;                                                      \
    }                                                                   \
    static Ix left(const T *v, T x, Ix lo, Ix hi) {                     \
        while (lo < hi) {                                               \
            Ix mid = lo + (hi - lo) / 2;                                \
            if (v[mid] < x)                                             \
                lo = mid + 1;                                           \
            else                                                        \
                hi = mid;                                               \
        }                                                               \
        return lo;                                                      \
    }

DEFINE_BISECT(bisect_r, bisect_l, Ix)

static PyObject *vec_to_list(const Ix *v, Ix n) {
    PyObject *l = PyList_New(n);
    if (!l) return NULL;
    for (Ix i = 0; i < n; i++) {
        PyObject *o = PyLong_FromSsize_t(v[i]);
        if (!o) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, o);
    }
    return l;
}

static int list_to_vec(PyObject *seq, IxVec *out) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (!fast) return -1;
    Ix n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Ix i = 0; i < n; i++) {
        Ix x = PyLong_AsSsize_t(items[i]);
        if (x == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        if (vec_push(out, x) < 0) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* ------------------------------------------------------------------ protected spans (spans.py) */

typedef struct {
    Ix s, e;
    int kind;
} Match;

typedef struct {
    Match *v;
    Ix n, cap;
} MatchVec;

static int mv_push(MatchVec *a, Ix s, Ix e, int kind) {
    if (a->n == a->cap) {
        Ix cap = a->cap ? a->cap * 2 : 256;
        Match *v = (Match *)PyMem_Realloc(a->v, (size_t)cap * sizeof(Match));
        if (!v) {
            PyErr_NoMemory();
            return -1;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n].s = s;
    a->v[a->n].e = e;
    a->v[a->n].kind = kind;
    a->n++;
    return 0;
}

static int match_cmp(const void *x, const void *y) {
    const Match *a = (const Match *)x, *b = (const Match *)y;
    if (a->s != b->s) return a->s < b->s ? -1 : 1;
    if (a->e != b->e) return a->e > b->e ? -1 : 1; /* longer first */
    return a->kind - b->kind;
}

/* Sort the matches: each pattern's matches come out in start order (kinds appended one after another),
 * so a k-way merge of those runs replaces a general sort. */
static int merge_runs(MatchVec *mv) {
    Ix head[8], end[8];
    int nr = 0;
    for (Ix i = 0; i < mv->n; i++) {
        if (i == 0 || mv->v[i].kind != mv->v[i - 1].kind || mv->v[i].s <= mv->v[i - 1].s) {
            if (nr == 8) { /* not expected: fall back to a full sort */
                qsort(mv->v, (size_t)mv->n, sizeof(Match), match_cmp);
                return 0;
            }
            if (nr) end[nr - 1] = i;
            head[nr++] = i;
        }
    }
    if (nr <= 1) return 0;
    end[nr - 1] = mv->n;
    Match *out = (Match *)PyMem_Malloc((size_t)mv->n * sizeof(Match));
    if (!out) {
        PyErr_NoMemory();
        return -1;
    }
    for (Ix k = 0; k < mv->n; k++) {
        int best = -1;
        for (int r = 0; r < nr; r++) {
            if (head[r] < end[r] && (best < 0 || match_cmp(&mv->v[head[r]], &mv->v[head[best]]) < 0)) best = r;
        }
        out[k] = mv->v[head[best]++];
    }
    PyMem_Free(mv->v);
    mv->v = out;
    mv->cap = mv->n;
    return 0;
}

static inline int is_gows(Py_UCS4 c) { return c == '\t' || c == '\n' || c == '\f' || c == '\r' || c == ' '; }
static inline int is_word(Py_UCS4 c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

/* `[^X\n]{min,max}` then the closing char X, from p: returns the index of X or -1. */
static Ix bounded_run(const Text *t, Ix p, Py_UCS4 close, Ix mn, Ix mx) {
    Ix q = p;
    while (q < t->n && q - p <= mx) {
        Py_UCS4 c = BY(t, q);
        if (c == close || c == '\n') break;
        q++;
    }
    if (q - p > mx || q - p < mn || q >= t->n || BY(t, q) != close) return -1;
    return q;
}

/* `[^\]\n]{mn,200}\]\([^)\n]{1,500}\)` from p (just after the '['): end of match or -1. */
static Ix label_target(const Text *t, Ix p, Ix mn) {
    Ix q = bounded_run(t, p, ']', mn, 200);
    if (q < 0 || q + 1 >= t->n || BY(t, q + 1) != '(') return -1;
    Ix r = bounded_run(t, q + 2, ')', 1, 500);
    return r < 0 ? -1 : r + 1;
}

/* `\|(?:[^|\n]*+\|)++` from a pipe at p: index after the last pipe of the line, *ok = at least one cell. */
static Ix pipe_cells(const Text *t, Ix p, int *ok) {
    /* The possessive cells end after the last pipe before the line end. */
    Ix end = find_ch(t, '\n', p + 1, t->n);
    if (end < 0) end = t->n;
    Ix last = end - 1;
    while (last > p && t->b[last] != '|') last--;
    *ok = last > p;
    return last + 1;
}

static Ix skip_nl(const Text *t, Ix q) {
    while (q < t->n && (BY(t, q) == '\r' || BY(t, q) == '\n')) q++;
    return q;
}

static Ix skip_ws(const Text *t, Ix q) {
    while (q < t->n && is_gows(BY(t, q))) q++;
    return q;
}

/* TABLE_HEADER tail after the header row's `[\r\n]++`: separator cells then `\|[\r\n]+`. */
static Ix header_tail(const Text *t, Ix x, IxVec *iters) {
    iters->n = 0;
    Ix pos = skip_ws(t, x);
    if (vec_push(iters, pos) < 0) return -2;
    for (;;) {
        if (pos >= t->n || BY(t, pos) != '|') break;
        Ix q = skip_ws(t, pos + 1);
        if (q < t->n && BY(t, q) == ':') q++;
        Ix d = q;
        while (d < t->n && BY(t, d) == '-') d++;
        if (d - q < 3) break;
        q = d;
        if (q < t->n && BY(t, q) == ':') q++;
        q = skip_ws(t, q);
        pos = q;
        if (vec_push(iters, pos) < 0) return -2;
    }
    /* Greedy group with backtracking: the longest k >= 1 iterations followed by `\|[\r\n]+`. */
    for (Ix k = iters->n - 1; k >= 1; k--) {
        Ix p = iters->v[k];
        if (p + 1 < t->n && BY(t, p) == '|' && (BY(t, p + 1) == '\r' || BY(t, p + 1) == '\n'))
            return skip_nl(t, p + 1);
    }
    return -1;
}

static int scan_table(const Text *t, int header, MatchVec *out, IxVec *iters) {
    Ix pos = 0, last = 0;
    for (;;) {
        Ix p = find_ch(t, '|', pos, t->n);
        if (p < 0) return 0;
        int ok;
        Ix q = pipe_cells(t, p, &ok);
        Ix e = -1;
        if (ok && q < t->n && (BY(t, q) == '\r' || BY(t, q) == '\n')) {
            Ix r = skip_nl(t, q);
            if (header) {
                e = header_tail(t, r, iters);
                if (e == -2) return -1;
            } else {
                e = r;
            }
        }
        if (e < 0) {
            /* Every pipe up to the line's last one gives the same cells, hence the same failure. */
            pos = q;
            continue;
        }
        Ix s = p;
        while (s > last && BY(t, s - 1) == ' ') s--;
        if (mv_push(out, s, e, header ? 3 : 4) < 0) return -1;
        last = e;
        pos = e;
    }
}

static int has_header_sep(const Text *t) {
    /* `\|[\t\n\f\r ]*:?---` anywhere */
    Ix pos = 0;
    for (;;) {
        Ix p = find_ch(t, '|', pos, t->n);
        if (p < 0) return 0;
        Ix q = skip_ws(t, p + 1);
        if (q < t->n && BY(t, q) == ':') q++;
        if (q + 2 < t->n && BY(t, q) == '-' && BY(t, q + 1) == '-' && BY(t, q + 2) == '-') return 1;
        pos = p + 1;
    }
}

static int scan_all(const Text *t, MatchVec *mv) {
    static const Py_UCS4 DD[2] = {'$', '$'};
    static const Py_UCS4 BT[3] = {'`', '`', '`'};
    Ix n = t->n, pos;
    /* MATH  \$\$.*?\$\$  (DOTALL) */
    pos = 0;
    for (;;) {
        Ix i = find_str(t, DD, 2, pos, n);
        if (i < 0) break;
        Ix j = find_str(t, DD, 2, i + 2, n);
        if (j < 0) break;
        if (mv_push(mv, i, j + 2, 0) < 0) return -1;
        pos = j + 2;
    }
    /* IMAGE and LINK */
    for (int kind = 1; kind <= 2; kind++) {
        pos = 0;
        for (;;) {
            Ix i = find_ch(t, kind == 1 ? '!' : '[', pos, n);
            if (i < 0) break;
            Ix e = -1;
            if (kind == 1) {
                if (i + 1 < n && BY(t, i + 1) == '[') e = label_target(t, i + 2, 0);
            } else {
                e = label_target(t, i + 1, 1);
            }
            if (e >= 0) {
                if (mv_push(mv, i, e, kind) < 0) return -1;
                pos = e;
            } else {
                pos = i + 1;
            }
        }
    }
    /* TABLE_HEADER, TABLE_ROW */
    if (find_ch(t, '|', 0, n) >= 0) {
        IxVec iters = {0};
        int rc = 0;
        if (has_header_sep(t)) rc = scan_table(t, 1, mv, &iters);
        if (rc == 0) rc = scan_table(t, 0, mv, &iters);
        vec_free(&iters);
        if (rc < 0) return -1;
    }
    /* FENCE  ```[0-9A-Za-z_]*[\r\n].*?```  (DOTALL) */
    pos = 0;
    Ix noclose = n + 1; /* no "```" at or after this index */
    for (;;) {
        Ix s = find_str(t, BT, 3, pos, n);
        if (s < 0) break;
        Ix q = s + 3;
        while (q < n && is_word(BY(t, q))) q++;
        if (q < n && (BY(t, q) == '\r' || BY(t, q) == '\n')) {
            Ix p = q + 1;
            Ix j = p >= noclose ? -1 : find_str(t, BT, 3, p, n);
            if (j >= 0) {
                if (mv_push(mv, s, j + 3, 5) < 0) return -1;
                pos = j + 3;
                continue;
            }
            if (p < noclose) noclose = p;
        }
        pos = s + 1;
    }
    /* INLINE_CODE  `[^`\r\n]+` */
    pos = 0;
    for (;;) {
        Ix s = find_ch(t, '`', pos, n);
        if (s < 0) break;
        Ix q = s + 1;
        while (q < n) {
            Py_UCS4 c = BY(t, q);
            if (c == '`' || c == '\r' || c == '\n') break;
            q++;
        }
        if (q > s + 1 && q < n && BY(t, q) == '`') {
            if (mv_push(mv, s, q + 1, 6) < 0) return -1;
            pos = q + 1;
        } else {
            pos = s + 1;
        }
    }
    return 0;
}

/* Spans object: sorted, non-overlapping spans as C arrays. */
typedef struct {
    PyObject_HEAD Ix n;
    Ix *starts;
    Ix *ends;
    char *hdr;
    PyObject *text; /* the text whose byte view is cached below */
    const uint8_t *view;
    uint8_t *view_owned;
} SpansObject;

static void spans_dealloc(SpansObject *self) {
    PyMem_Free(self->starts);
    PyMem_Free(self->ends);
    PyMem_Free(self->hdr);
    PyMem_Free(self->view_owned);
    Py_XDECREF(self->text);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject SpansType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chalicelib.chunker._native.Spans",
    .tp_basicsize = sizeof(SpansObject),
    .tp_dealloc = (destructor)spans_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Protected spans as C arrays (see spans.Spans).",
};

static SpansObject *spans_alloc(Ix n) {
    SpansObject *o = PyObject_New(SpansObject, &SpansType);
    if (!o) return NULL;
    o->n = n;
    o->text = NULL;
    o->view = NULL;
    o->view_owned = NULL;
    o->starts = (Ix *)PyMem_Malloc(sizeof(Ix) * (size_t)(n ? n : 1));
    o->ends = (Ix *)PyMem_Malloc(sizeof(Ix) * (size_t)(n ? n : 1));
    o->hdr = (char *)PyMem_Malloc((size_t)(n ? n : 1));
    if (!o->starts || !o->ends || !o->hdr) {
        Py_DECREF(o);
        PyErr_NoMemory();
        return NULL;
    }
    return o;
}

/* Text access for `text` through the byte view cached on the spans (built once per text). */
static int sp_text(SpansObject *sp, PyObject *text, Text *t) {
    if (text_init(t, text) < 0) return -1;
    if (sp->text == text) {
        t->b = sp->view;
        return 0;
    }
    if (text_view(t, text) < 0) return -1;
    if (!sp->text) {
        /* first use: the spans keep the view (and the text alive) */
        sp->text = Py_NewRef(text);
        sp->view = t->b;
        sp->view_owned = t->owned;
        t->owned = NULL;
    }
    /* otherwise a private view for this call (text_free releases it); a cached view is never replaced
     * because another thread may be reading it while this one runs Python code */
    return 0;
}

static inline int sp_inside(const SpansObject *sp, Ix pos) {
    Ix i = bisect_r(sp->starts, pos, 0, sp->n) - 1;
    return i >= 0 && pos < sp->ends[i];
}

static inline int sp_strictly(const SpansObject *sp, Ix pos) {
    Ix i = bisect_r(sp->starts, pos - 1, 0, sp->n) - 1;
    return i >= 0 && pos < sp->ends[i] && sp->starts[i] < pos;
}

/* find_spans(text) -> (starts, ends, header_starts, Spans) */
static PyObject *py_find_spans(PyObject *mod, PyObject *arg) {
    Text t;
    if (text_init(&t, arg) < 0 || text_view(&t, arg) < 0) return NULL;
    MatchVec mv = {0};
    if (scan_all(&t, &mv) < 0) {
        PyMem_Free(mv.v);
        text_free(&t);
        return NULL;
    }
    if (merge_runs(&mv) < 0) {
        PyMem_Free(mv.v);
        text_free(&t);
        return NULL;
    }
    SpansObject *sp = spans_alloc(mv.n);
    if (!sp) {
        PyMem_Free(mv.v);
        text_free(&t);
        return NULL;
    }
    sp->text = Py_NewRef(arg);
    sp->view = t.b;
    sp->view_owned = t.owned;
    Ix k = 0, last = 0, nh = 0;
    for (Ix i = 0; i < mv.n; i++) {
        if (mv.v[i].s >= last) {
            sp->starts[k] = mv.v[i].s;
            sp->ends[k] = mv.v[i].e;
            sp->hdr[k] = mv.v[i].kind == 3;
            nh += sp->hdr[k];
            last = mv.v[i].e;
            k++;
        }
    }
    sp->n = k;
    PyMem_Free(mv.v);
    PyObject *starts = vec_to_list(sp->starts, k);
    PyObject *ends = vec_to_list(sp->ends, k);
    PyObject *hdrs = PyList_New(nh);
    if (!starts || !ends || !hdrs) goto fail;
    for (Ix i = 0, h = 0; i < k; i++) {
        if (sp->hdr[i]) {
            PyObject *o = PyLong_FromSsize_t(sp->starts[i]);
            if (!o) goto fail;
            PyList_SET_ITEM(hdrs, h++, o);
        }
    }
    return Py_BuildValue("(NNNN)", starts, ends, hdrs, (PyObject *)sp);
fail:
    Py_XDECREF(starts);
    Py_XDECREF(ends);
    Py_XDECREF(hdrs);
    Py_DECREF(sp);
    return NULL;
}

/* spans_from_lists(starts, ends, header_starts: set) -> Spans */
static PyObject *py_spans_from_lists(PyObject *mod, PyObject *args) {
    PyObject *ls, *le, *hs;
    if (!PyArg_ParseTuple(args, "OOO", &ls, &le, &hs)) return NULL;
    IxVec s = {0}, e = {0};
    if (list_to_vec(ls, &s) < 0 || list_to_vec(le, &e) < 0 || s.n != e.n) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        vec_free(&s);
        vec_free(&e);
        return NULL;
    }
    SpansObject *sp = spans_alloc(s.n);
    if (!sp) {
        vec_free(&s);
        vec_free(&e);
        return NULL;
    }
    for (Ix i = 0; i < s.n; i++) {
        sp->starts[i] = s.v[i];
        sp->ends[i] = e.v[i];
        PyObject *key = PyLong_FromSsize_t(s.v[i]);
        int c = key ? PySequence_Contains(hs, key) : -1;
        Py_XDECREF(key);
        if (c < 0) {
            vec_free(&s);
            vec_free(&e);
            Py_DECREF(sp);
            return NULL;
        }
        sp->hdr[i] = (char)c;
    }
    vec_free(&s);
    vec_free(&e);
    return (PyObject *)sp;
}

/* ------------------------------------------------------------------ token measure (lengths.TokenMeasure) */

typedef struct {
    PyObject_HEAD PyObject *text;
    PyObject *counter;
    PyObject *cache; /* counter.cache */
    PyObject *count_ids; /* counter._count_ids: text -> token list (tiktoken's CoreBPE.encode_ordinary) */
    Text t;
    int64_t *starts;
    int64_t *cum;
    Ix ns; /* len(starts) == len(cum) */
    int additive;
    Ix mbpt;
    Ix bpr;
} TokMeasure;

static PyTypeObject TokMeasureType;

/* counter(text[a:b]) through its cache */
static int tm_cnt_obj(TokMeasure *m, PyObject *s, Ix *out) {
    PyObject *v = PyDict_GetItemWithError(m->cache, s);
    if (v) {
        Py_INCREF(v);
    } else {
        if (PyErr_Occurred()) return -1;
        v = NULL;
        if (m->count_ids) {
            /* counter(s) without its Python frames: cache[s] = len(encode_ordinary(s)) */
            PyObject *ids = PyObject_CallOneArg(m->count_ids, s);
            if (ids) {
                Py_ssize_t k = PyObject_Length(ids);
                Py_DECREF(ids);
                if (k < 0) return -1;
                v = PyLong_FromSsize_t(k);
                if (!v || PyDict_SetItem(m->cache, s, v) < 0) {
                    Py_XDECREF(v);
                    return -1;
                }
            } else if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                PyErr_Clear(); /* lone surrogates: the counter's own path repairs them */
            } else {
                return -1;
            }
        }
        if (!v) v = PyObject_CallOneArg(m->counter, s);
        if (!v) return -1;
    }
    Ix r = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (r == -1 && PyErr_Occurred()) return -1;
    *out = r;
    return 0;
}

static int tm_cnt(TokMeasure *m, Ix a, Ix b, Ix *out) {
    PyObject *s = PyUnicode_Substring(m->text, a, b);
    if (!s) return -1;
    int rc = tm_cnt_obj(m, s, out);
    Py_DECREF(s);
    return rc;
}

DEFINE_BISECT(bisect_r64, bisect_l64, int64_t)

static int tm_length(TokMeasure *m, Ix a, Ix b, Ix *out) {
    if (a >= b) {
        *out = 0;
        return 0;
    }
    if (!m->additive) return tm_cnt(m, a, b, out);
    Ix i = bisect_l64(m->starts, a, 0, m->ns);
    Ix j = bisect_r64(m->starts, b, 0, m->ns) - 1;
    if (i > j) return tm_cnt(m, a, b, out);
    Ix total = (Ix)(m->cum[j] - m->cum[i]);
    Ix si = (Ix)m->starts[i], sj = (Ix)m->starts[j], x;
    if (a < si) {
        if (tm_cnt(m, a, si, &x) < 0) return -1;
        total += x;
    }
    if (b > sj) {
        if (tm_cnt(m, sj, b, &x) < 0) return -1;
        total += x;
    }
    *out = total;
    return 0;
}

static int tm_fits(TokMeasure *m, Ix a, Ix b, Ix budget, int *out) {
    if (m->mbpt && (b - a) * m->bpr <= budget) {
        *out = 1;
        return 0;
    }
    Ix l;
    if (tm_length(m, a, b, &l) < 0) return -1;
    *out = l <= budget;
    return 0;
}

static Ix tm_approx_pos(TokMeasure *m, Ix p, Ix tokens) {
    Ix i = bisect_r64(m->starts, p, 0, m->ns) - 1;
    int64_t target = m->cum[i] + tokens;
    Ix j = bisect_r64(m->cum, target, 0, m->ns) - 1;
    if (j > m->ns - 1) j = m->ns - 1;
    /* Python's starts[-1] when j == -1 */
    if (j < 0) j += m->ns;
    return (Ix)m->starts[j];
}

static int tm_last_fitting(TokMeasure *m, Ix p, Ix budget, const Ix *ends, Ix lo, Ix hi, Ix *out) {
    if (lo >= hi) {
        *out = lo - 1;
        return 0;
    }
    Ix k, l, good, bad, step;
    if (m->additive) {
        k = bisect_r(ends, tm_approx_pos(m, p, budget), lo, hi) - 1;
        if (k > hi - 1) k = hi - 1;
        if (k < lo) k = lo;
    } else {
        k = lo;
    }
    if (tm_length(m, p, ends[k], &l) < 0) return -1;
    if (l <= budget) {
        step = 1;
        good = k;
        bad = hi;
        while (good + step < hi) {
            if (tm_length(m, p, ends[good + step], &l) < 0) return -1;
            if (l <= budget) {
                good += step;
                step *= 2;
            } else {
                bad = good + step;
                break;
            }
        }
    } else {
        step = 1;
        good = lo - 1;
        bad = k;
        while (bad - step >= lo) {
            if (tm_length(m, p, ends[bad - step], &l) < 0) return -1;
            if (l <= budget) {
                good = bad - step;
                break;
            }
            bad -= step;
            step *= 2;
        }
    }
    while (bad - good > 1) {
        Ix mid = (good + bad) / 2; /* both >= -1: floor division matches Python */
        if (tm_length(m, p, ends[mid], &l) < 0) return -1;
        if (l <= budget)
            good = mid;
        else
            bad = mid;
    }
    *out = good;
    return 0;
}

static int tm_window_start(TokMeasure *m, Ix p, Ix end, Ix budget, Ix *out) {
    if (budget <= 0 || p >= end) {
        *out = end;
        return 0;
    }
    Ix l;
    if (m->additive) {
        Ix j = bisect_r64(m->starts, end, 0, m->ns) - 1;
        if (j < 0) j += m->ns;
        Ix sj = (Ix)m->starts[j], tail = 0;
        if (end > sj && tm_cnt(m, sj, end, &tail) < 0) return -1;
        if (tail > budget) {
            *out = end;
            return 0;
        }
        Ix i = bisect_l64(m->cum, m->cum[j] + tail - budget, 0, j + 1);
        Ix w = (Ix)m->starts[i];
        *out = p > w ? p : w;
        return 0;
    }
    if (tm_length(m, p, end, &l) < 0) return -1;
    if (l <= budget) {
        *out = p;
        return 0;
    }
    Ix lo = p, hi = end;
    while (hi - lo > 1) {
        Ix mid = (lo + hi) / 2;
        if (tm_length(m, mid, end, &l) < 0) return -1;
        if (l <= budget)
            hi = mid;
        else
            lo = mid;
    }
    *out = hi;
    return 0;
}

static int tm_text_len(TokMeasure *m, PyObject *s, Ix *out) {
    if (PyUnicode_GET_LENGTH(s) == 0) {
        *out = 0;
        return 0;
    }
    return tm_cnt_obj(m, s, out);
}

/* ---------------- segment cache: word -> count(" " + word), keyed by code points (any str kind) */

typedef struct {
    uint64_t h;
    PyObject *key;
    int64_t count; /* -1 while pending */
} SegEntry;

/* Open addressing over a compact slot array (hash high bits | entry index + 1), entries stored densely:
 * the slots stay cache-resident, and entry indices survive growth. */
typedef struct {
    PyObject_HEAD Ix cap, n, ecap;
    int busy; /* a build is filling pending entries (it calls Python, so another thread may come in) */
    uint64_t *slot;
    SegEntry *e;
} SegCache;

static void sc_dealloc(SegCache *c) {
    for (Ix i = 0; i < c->n; i++) Py_XDECREF(c->e[i].key);
    PyMem_Free(c->e);
    PyMem_Free(c->slot);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static Py_ssize_t sc_len(SegCache *c) { return c->n; }

static PySequenceMethods sc_as_seq = {.sq_length = (lenfunc)sc_len};

static PyTypeObject SegCacheType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chalicelib.chunker._native.SegCache",
    .tp_basicsize = sizeof(SegCache),
    .tp_dealloc = (destructor)sc_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Token counts of \" \" + word for the words seen so far (TokenCounter.spaced in C).",
    .tp_as_sequence = &sc_as_seq,
    .tp_new = PyType_GenericNew,
};

static uint64_t span_hash(const Text *t, Ix a, Ix b) {
    uint64_t h = 1469598103934665603ULL;
    if (t->kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *d = (const Py_UCS1 *)t->data;
        for (Ix i = a; i < b; i++) h = (h ^ d[i]) * 1099511628211ULL;
    } else if (t->kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *d = (const Py_UCS2 *)t->data;
        for (Ix i = a; i < b; i++) h = (h ^ d[i]) * 1099511628211ULL;
    } else {
        const Py_UCS4 *d = (const Py_UCS4 *)t->data;
        for (Ix i = a; i < b; i++) h = (h ^ d[i]) * 1099511628211ULL;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 32);
}

static int span_eq(const Text *t, Ix a, Ix b, PyObject *key) {
    Ix n = b - a;
    if (PyUnicode_GET_LENGTH(key) != n) return 0;
    int kk = PyUnicode_KIND(key);
    const void *kd = PyUnicode_DATA(key);
    if (kk == t->kind) return memcmp((const char *)t->data + a * kk, kd, (size_t)(n * kk)) == 0;
    for (Ix i = 0; i < n; i++)
        if (PyUnicode_READ(kk, kd, i) != CH(t, a + i)) return 0;
    return 1;
}

static int sc_grow_slots(SegCache *c) {
    Ix cap = c->cap ? c->cap * 2 : 4096;
    uint64_t *sl = (uint64_t *)PyMem_Calloc((size_t)cap, sizeof(uint64_t));
    if (!sl) {
        PyErr_NoMemory();
        return -1;
    }
    for (Ix i = 0; i < c->n; i++) {
        uint64_t h = c->e[i].h;
        Ix j = (Ix)(h & (uint64_t)(cap - 1));
        while (sl[j]) j = (j + 1) & (cap - 1);
        sl[j] = (h & 0xFFFFFFFF00000000ULL) | (uint64_t)(i + 1);
    }
    PyMem_Free(c->slot);
    c->slot = sl;
    c->cap = cap;
    return 0;
}

/* Index of the entry for text[a:b], appended as pending (count -1) when absent; -1 on error. */
static Ix sc_get(SegCache *c, PyObject *text, const Text *t, Ix a, Ix b, uint64_t h, int *inserted) {
    if ((c->n + 1) * 2 > c->cap && sc_grow_slots(c) < 0) return -1;
    uint64_t hi = h & 0xFFFFFFFF00000000ULL;
    Ix j = (Ix)(h & (uint64_t)(c->cap - 1));
    for (;;) {
        uint64_t v = c->slot[j];
        if (!v) break;
        if ((v & 0xFFFFFFFF00000000ULL) == hi) {
            Ix idx = (Ix)(v & 0xFFFFFFFFULL) - 1;
            if (c->e[idx].h == h && span_eq(t, a, b, c->e[idx].key)) {
                *inserted = 0;
                return idx;
            }
        }
        j = (j + 1) & (c->cap - 1);
    }
    if (c->n == c->ecap) {
        Ix ecap = c->ecap ? c->ecap * 2 : 2048;
        SegEntry *e = (SegEntry *)PyMem_Realloc(c->e, (size_t)ecap * sizeof(SegEntry));
        if (!e) {
            PyErr_NoMemory();
            return -1;
        }
        c->e = e;
        c->ecap = ecap;
    }
    PyObject *key = PyUnicode_Substring(text, a, b);
    if (!key) return -1;
    Ix idx = c->n++;
    c->e[idx].h = h;
    c->e[idx].key = key;
    c->e[idx].count = -1;
    c->slot[j] = hi | (uint64_t)(idx + 1);
    *inserted = 1;
    return idx;
}

static Ix utf8_len(PyObject *s) {
    if (PyUnicode_IS_ASCII(s)) return PyUnicode_GET_LENGTH(s);
    int k = PyUnicode_KIND(s);
    const void *d = PyUnicode_DATA(s);
    Ix n = PyUnicode_GET_LENGTH(s), r = 0;
    for (Ix i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(k, d, i);
        r += c < 0x80 ? 1 : c < 0x800 ? 2 : (c >= 0xD800 && c < 0xE000) ? 3 : c < 0x10000 ? 3 : 4;
    }
    return r;
}

static int call_count_spaced(PyObject *count, PyObject *word, int64_t *out) {
    PyObject *sp = PyUnicode_FromOrdinal(' ');
    PyObject *s = sp ? PyUnicode_Concat(sp, word) : NULL;
    Py_XDECREF(sp);
    if (!s) return -1;
    PyObject *v = PyObject_CallOneArg(count, s);
    Py_DECREF(s);
    if (!v) return -1;
    Ix r = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (r == -1 && PyErr_Occurred()) return -1;
    *out = r;
    return 0;
}

/* TokenCounter.count_new for the pending entries: one bulk encode of " w1 w2 ..." when the counter has
 * one (word counts read off the token byte lengths, misaligned words encoded alone), else one call each. */
static int count_pending(PyObject *counter, SegCache *sc, const Ix *pend, Ix np) {
    PyObject *count = PyObject_GetAttrString(counter, "count");
    PyObject *bulk = count ? PyObject_GetAttrString(counter, "_bulk") : NULL;
    PyObject *table = bulk ? PyObject_GetAttrString(counter, "_tok_bytes") : NULL;
    PyObject *joined = NULL, *ids = NULL;
    Py_buffer ib = {0}, tb = {0};
    int rc = -1;
    if (!table) goto done;
    if (bulk != Py_None && table != Py_None && np >= 8) {
        PyObject *lst = PyList_New(np);
        if (!lst) goto done;
        for (Ix i = 0; i < np; i++) PyList_SET_ITEM(lst, i, Py_NewRef(sc->e[pend[i]].key));
        PyObject *sep = PyUnicode_FromOrdinal(' ');
        PyObject *body = sep ? PyUnicode_Join(sep, lst) : NULL;
        Py_DECREF(lst);
        joined = body ? PyUnicode_Concat(sep, body) : NULL;
        Py_XDECREF(sep);
        Py_XDECREF(body);
        if (!joined) goto done;
        ids = PyObject_CallOneArg(bulk, joined);
        if (!ids) goto done;
        if (PyObject_GetBuffer(ids, &ib, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        if (PyObject_GetBuffer(table, &tb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        if (ib.itemsize != 4 || tb.itemsize != 8) {
            PyErr_SetString(PyExc_TypeError, "bulk ids must be uint32 and the byte table int64");
            goto done;
        }
        const uint32_t *tid = (const uint32_t *)ib.buf;
        const int64_t *tlen = (const int64_t *)tb.buf;
        Ix ntok = ib.len / 4, ntab = tb.len / 8;
        /* walk tokens against word ends (each word's end includes its leading space) */
        Ix ti = 0;
        int64_t tok_end = 0, word_end = 0;
        int prev_aligned = 1;
        Ix prev_idx = 0;
        for (Ix w = 0; w < np; w++) {
            word_end += utf8_len(sc->e[pend[w]].key) + 1;
            while (ti < ntok) {
                uint32_t id = tid[ti];
                int64_t l = id < (uint32_t)ntab ? tlen[id] : 0;
                if (tok_end + l > word_end) break;
                tok_end += l;
                ti++;
            }
            /* ti = number of tokens ending at or before word_end */
            int aligned = ti > 0 && tok_end == word_end;
            int64_t c = (int64_t)(ti - prev_idx);
            if (aligned && prev_aligned) {
                sc->e[pend[w]].count = c;
            } else {
                int64_t one;
                if (call_count_spaced(count, sc->e[pend[w]].key, &one) < 0) goto done;
                sc->e[pend[w]].count = one;
            }
            prev_aligned = aligned;
            prev_idx = ti;
        }
    } else {
        for (Ix i = 0; i < np; i++) {
            int64_t one;
            if (call_count_spaced(count, sc->e[pend[i]].key, &one) < 0) goto done;
            sc->e[pend[i]].count = one;
        }
    }
    rc = 0;
done:
    if (ib.obj) PyBuffer_Release(&ib);
    if (tb.obj) PyBuffer_Release(&tb);
    Py_XDECREF(count);
    Py_XDECREF(bulk);
    Py_XDECREF(table);
    Py_XDECREF(joined);
    Py_XDECREF(ids);
    return rc;
}

/* Segment boundaries: a ' ' followed by a non-whitespace rune (re ` (?=\S)`, Unicode \s). Segment 0 is
 * the text before the first boundary; segment i >= 1 is " " + words[i]. */
static PyObject *tm_build(TokMeasure *m) {
    const Text *t = &m->t;
    Ix n = t->n;
    IxVec b = {0};
    Ix *ent = NULL, *pend = NULL, np = 0;
    uint64_t *hashes = NULL;
    PyObject *res = NULL, *cache = PyObject_GetAttrString(m->counter, "_native_cache");
    if (!cache) goto done;
    if (cache == Py_None) {
        Py_DECREF(cache);
        cache = PyObject_CallNoArgs((PyObject *)&SegCacheType);
        if (!cache || PyObject_SetAttrString(m->counter, "_native_cache", cache) < 0) goto done;
    }
    if (!PyObject_TypeCheck(cache, &SegCacheType)) {
        PyErr_SetString(PyExc_TypeError, "counter._native_cache must be a SegCache");
        goto done;
    }
    if (((SegCache *)cache)->busy) {
        /* in use by a build that is waiting on the tokenizer: work on a private cache instead */
        Py_SETREF(cache, PyObject_CallNoArgs((PyObject *)&SegCacheType));
        if (!cache) goto done;
    }
    SegCache *sc = (SegCache *)cache;
    sc->busy = 1;
    if (vec_push(&b, 0) < 0) goto done;
    for (Ix i = find_ch(t, ' ', 0, n - 1); i >= 0; i = find_ch(t, ' ', i + 1, n - 1)) {
        Py_UCS4 c = BY(t, i + 1);
        if (c == 0x80) c = CH(t, i + 1);
        if (!Py_UNICODE_ISSPACE(c) && vec_push(&b, i) < 0) goto done;
    }
    if (vec_push(&b, n) < 0) goto done;
    Ix nw = b.n - 1;
    ent = (Ix *)PyMem_Malloc(sizeof(Ix) * (size_t)(nw ? nw : 1));
    pend = (Ix *)PyMem_Malloc(sizeof(Ix) * (size_t)(nw ? nw : 1));
    hashes = (uint64_t *)PyMem_Malloc(sizeof(uint64_t) * (size_t)(nw ? nw : 1));
    if (!ent || !pend || !hashes) {
        PyErr_NoMemory();
        goto done;
    }
    for (Ix w = 0; w < nw; w++) hashes[w] = span_hash(t, w == 0 ? 0 : b.v[w] + 1, b.v[w + 1]);
    for (Ix w = 0; w < nw; w++) {
        int ins;
#if defined(__GNUC__)
        /* the table is bigger than the caches: fetch the slot a few words ahead */
        if (w + 16 < nw && sc->cap) __builtin_prefetch(&sc->slot[hashes[w + 16] & (uint64_t)(sc->cap - 1)]);
        if (w + 8 < nw && sc->cap) {
            uint64_t v = sc->slot[hashes[w + 8] & (uint64_t)(sc->cap - 1)];
            if (v) {
                const SegEntry *pe = &sc->e[(v & 0xFFFFFFFFULL) - 1];
                __builtin_prefetch(pe);
                __builtin_prefetch(pe->key);
            }
        }
#endif
        Ix s = w == 0 ? 0 : b.v[w] + 1;
        Ix e = sc_get(sc, m->text, t, s, b.v[w + 1], hashes[w], &ins);
        if (e < 0) goto done;
        ent[w] = e;
        if (ins) pend[np++] = e;
    }
    if (np && count_pending(m->counter, sc, pend, np) < 0) goto done;
    m->ns = nw + 1;
    m->starts = (int64_t *)PyMem_Malloc(sizeof(int64_t) * (size_t)m->ns);
    m->cum = (int64_t *)PyMem_Malloc(sizeof(int64_t) * (size_t)m->ns);
    if (!m->starts || !m->cum) {
        PyErr_NoMemory();
        goto done;
    }
    m->cum[0] = 0;
    for (Ix w = 0; w < nw; w++) {
        m->starts[w] = b.v[w];
        int64_t c = sc->e[ent[w]].count;
        if (w == 0) {
            /* words[0] has no leading space in the text */
            PyObject *v = PyObject_CallOneArg(m->counter, sc->e[ent[0]].key);
            if (!v) goto done;
            c = PyLong_AsSsize_t(v);
            Py_DECREF(v);
            if (c == -1 && PyErr_Occurred()) goto done;
        }
        m->cum[w + 1] = m->cum[w] + c;
    }
    m->starts[nw] = n;
    res = Py_NewRef(Py_None);
done:
    if (!res && np) {
        /* pending entries never got a count: drop the whole cache rather than keep them */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (PyObject_SetAttrString(m->counter, "_native_cache", Py_None) < 0) PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    if (cache && PyObject_TypeCheck(cache, &SegCacheType)) ((SegCache *)cache)->busy = 0;
    vec_free(&b);
    PyMem_Free(ent);
    PyMem_Free(pend);
    PyMem_Free(hashes);
    Py_XDECREF(cache);
    return res;
}

static PyObject *tm_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *text, *counter;
    static char *kwlist[] = {"text", "counter", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "UO", kwlist, &text, &counter)) return NULL;
    TokMeasure *m = (TokMeasure *)type->tp_alloc(type, 0);
    if (!m) return NULL;
    Py_INCREF(text);
    m->text = text;
    Py_INCREF(counter);
    m->counter = counter;
    text_init(&m->t, text);
    m->bpr = PyUnicode_IS_ASCII(text) ? 1 : 4;
    PyObject *o = PyObject_GetAttrString(counter, "additive");
    if (!o) goto fail;
    m->additive = PyObject_IsTrue(o);
    Py_DECREF(o);
    if (m->additive < 0) goto fail;
    o = PyObject_GetAttrString(counter, "max_bytes_per_token");
    if (!o) goto fail;
    m->mbpt = PyLong_AsSsize_t(o);
    Py_DECREF(o);
    if (m->mbpt == -1 && PyErr_Occurred()) goto fail;
    m->cache = PyObject_GetAttrString(counter, "cache");
    if (!m->cache) goto fail;
    m->count_ids = PyObject_GetAttrString(counter, "_count_ids");
    if (!m->count_ids) goto fail;
    if (m->count_ids == Py_None) Py_CLEAR(m->count_ids);
    if (!PyDict_Check(m->cache)) {
        PyErr_SetString(PyExc_TypeError, "counter.cache must be a dict");
        goto fail;
    }
    if (!(m->additive && m->t.n)) {
        m->ns = 2;
        m->starts = (int64_t *)PyMem_Malloc(sizeof(int64_t) * 2);
        m->cum = (int64_t *)PyMem_Malloc(sizeof(int64_t) * 2);
        if (!m->starts || !m->cum) {
            PyErr_NoMemory();
            goto fail;
        }
        m->starts[0] = 0;
        m->starts[1] = m->t.n;
        m->cum[0] = m->cum[1] = 0;
        return (PyObject *)m;
    }
    if (text_view(&m->t, text) < 0) goto fail;
    o = tm_build(m);
    text_free(&m->t);
    if (!o) goto fail;
    Py_DECREF(o);
    return (PyObject *)m;
fail:
    Py_DECREF(m);
    return NULL;
}

static void tm_dealloc(TokMeasure *m) {
    Py_XDECREF(m->text);
    Py_XDECREF(m->counter);
    Py_XDECREF(m->cache);
    Py_XDECREF(m->count_ids);
    PyMem_Free(m->starts);
    PyMem_Free(m->cum);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *tm_py_length(TokMeasure *m, PyObject *args) {
    Ix a, b, r;
    if (!PyArg_ParseTuple(args, "nn", &a, &b)) return NULL;
    if (tm_length(m, a, b, &r) < 0) return NULL;
    return PyLong_FromSsize_t(r);
}

static PyObject *tm_py_fits(TokMeasure *m, PyObject *args) {
    Ix a, b, budget;
    int r;
    if (!PyArg_ParseTuple(args, "nnn", &a, &b, &budget)) return NULL;
    if (tm_fits(m, a, b, budget, &r) < 0) return NULL;
    return PyBool_FromLong(r);
}

static PyObject *tm_py_text_len(TokMeasure *m, PyObject *s) {
    Ix r;
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "str expected");
        return NULL;
    }
    if (tm_text_len(m, s, &r) < 0) return NULL;
    return PyLong_FromSsize_t(r);
}

static PyObject *tm_py_window_start(TokMeasure *m, PyObject *args) {
    Ix p, end, budget, r;
    if (!PyArg_ParseTuple(args, "nnn", &p, &end, &budget)) return NULL;
    if (tm_window_start(m, p, end, budget, &r) < 0) return NULL;
    return PyLong_FromSsize_t(r);
}

static PyObject *tm_py_last_fitting(TokMeasure *m, PyObject *args) {
    Ix p, budget, lo, hi, r;
    PyObject *ends;
    if (!PyArg_ParseTuple(args, "nnOnn", &p, &budget, &ends, &lo, &hi)) return NULL;
    IxVec v = {0};
    if (list_to_vec(ends, &v) < 0) return NULL;
    if (lo < 0 || hi > v.n) {
        vec_free(&v);
        PyErr_SetString(PyExc_IndexError, "lo/hi out of range");
        return NULL;
    }
    int rc = tm_last_fitting(m, p, budget, v.v, lo, hi, &r);
    vec_free(&v);
    if (rc < 0) return NULL;
    return PyLong_FromSsize_t(r);
}

static PyObject *tm_get_token_mode(TokMeasure *m, void *c) { Py_RETURN_TRUE; }
static PyObject *tm_get_text(TokMeasure *m, void *c) { return Py_NewRef(m->text); }
static PyObject *tm_get_counter(TokMeasure *m, void *c) { return Py_NewRef(m->counter); }

static PyMethodDef tm_methods[] = {
    {"length", (PyCFunction)tm_py_length, METH_VARARGS, "tokens of text[a:b]"},
    {"fits", (PyCFunction)tm_py_fits, METH_VARARGS, "length(a, b) <= budget"},
    {"text_len", (PyCFunction)tm_py_text_len, METH_O, "tokens of a string"},
    {"window_start", (PyCFunction)tm_py_window_start, METH_VARARGS, "smallest w >= p fitting to end"},
    {"last_fitting", (PyCFunction)tm_py_last_fitting, METH_VARARGS, "largest fitting index"},
    {NULL}};

static PyGetSetDef tm_getset[] = {{"token_mode", (getter)tm_get_token_mode, NULL, NULL, NULL},
                                  {"text", (getter)tm_get_text, NULL, NULL, NULL},
                                  {"counter", (getter)tm_get_counter, NULL, NULL, NULL},
                                  {NULL}};

static PyTypeObject TokMeasureType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chalicelib.chunker._native.TokMeasure",
    .tp_basicsize = sizeof(TokMeasure),
    .tp_dealloc = (destructor)tm_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "TokMeasure(text, counter): lengths.TokenMeasure with the segment index in C.",
    .tp_methods = tm_methods,
    .tp_getset = tm_getset,
    .tp_new = tm_new,
};

/* ------------------------------------------------------------------ measure dispatch */

typedef struct {
    TokMeasure *tm; /* NULL: runes */
} Meas;

static inline int m_length(Meas *m, Ix a, Ix b, Ix *out) {
    if (!m->tm) {
        *out = b - a;
        return 0;
    }
    return tm_length(m->tm, a, b, out);
}

static inline int m_fits(Meas *m, Ix a, Ix b, Ix budget, int *out) {
    if (!m->tm) {
        *out = b - a <= budget;
        return 0;
    }
    return tm_fits(m->tm, a, b, budget, out);
}

static inline int m_last_fitting(Meas *m, Ix p, Ix budget, const Ix *ends, Ix lo, Ix hi, Ix *out) {
    if (!m->tm) {
        *out = bisect_r(ends, p + budget, lo, hi) - 1;
        return 0;
    }
    return tm_last_fitting(m->tm, p, budget, ends, lo, hi, out);
}

static inline int m_window_start(Meas *m, Ix p, Ix end, Ix budget, Ix *out) {
    if (!m->tm) {
        Ix w = end - budget;
        *out = p > w ? p : w;
        return 0;
    }
    return tm_window_start(m->tm, p, end, budget, out);
}

static int meas_init(Meas *m, PyObject *o) {
    if (o == Py_None) {
        m->tm = NULL;
        return 0;
    }
    if (!PyObject_TypeCheck(o, &TokMeasureType)) {
        PyErr_SetString(PyExc_TypeError, "measure must be None (runes) or a native TokMeasure");
        return -1;
    }
    m->tm = (TokMeasure *)o;
    return 0;
}

/* ------------------------------------------------------------------ overlap (recursive.overlap_start) */

static inline int is_pyspace_ascii(Py_UCS4 c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int overlap_start(const Text *t, const SpansObject *sp, Meas *m, Ix p, Ix end, Ix max_ov, IxVec *tmp,
                         Ix *out) {
    *out = end;
    if (max_ov <= 0 || p >= end) return 0;
    Ix w;
    if (m_window_start(m, p, end, max_ov, &w) < 0) return -1;
    if (w >= end) return 0;
    Ix ws = w - 4 > p ? w - 4 : p;
    Ix k = end;
    while (k > ws && is_pyspace_ascii(BY(t, k - 1))) k--;
    if (k <= w) return 0;
    Ix last_nonblank = k - 1;
    int has = sp->n > 0;
    Ix best = -1;
    /* _PARA: non-overlapping "\n\n" matches; both their positions are "paired" for the line-break pass */
    tmp->n = 0;
    Ix pos = ws;
    for (;;) {
        Ix s = find_ch(t, '\n', pos, end - 1);
        if (s < 0) break;
        if (BY(t, s + 1) != '\n') {
            pos = s + 1;
            continue;
        }
        Ix e = s + 2;
        if (vec_push(tmp, s) < 0) return -1;
        if (best < 0 && e >= w && e <= last_nonblank && !(has && (sp_inside(sp, s) || sp_strictly(sp, e))))
            best = e;
        pos = e;
    }
    if (best < 0) {
        Ix i = find_ch(t, '\n', ws, end);
        while (i >= 0) {
            Ix e = i + 1;
            if (e > last_nonblank) break;
            /* paired = {s, s+1 for each para match s}; tmp is sorted */
            Ix q = bisect_r(tmp->v, i, 0, tmp->n) - 1;
            int paired = q >= 0 && (tmp->v[q] == i || tmp->v[q] + 1 == i);
            if (!paired && e >= w && !(has && (sp_inside(sp, i) || sp_strictly(sp, e)))) {
                best = e;
                break;
            }
            i = find_ch(t, '\n', e, end);
        }
    }
    if (best < 0) {
        /* _SENT: [。？！]|[.?!] */
        for (Ix s = ws; s < end; s++) {
            Py_UCS4 c = BY(t, s);
            Ix e;
            if (c == 0x80) c = CH(t, s);
            if (c == 0x3002 || c == 0xFF1F || c == 0xFF01)
                e = s + 1;
            else if ((c == '.' || c == '?' || c == '!') && s + 1 < end && BY(t, s + 1) == ' ')
                e = s + 2;
            else
                continue;
            if (e > last_nonblank) break;
            if (e >= w && !(has && (sp_inside(sp, s) || sp_strictly(sp, e)))) {
                best = e;
                break;
            }
            s = e - 1;
        }
    }
    if (best < 0) return 0;
    if (m->tm) {
        Ix l;
        if (tm_length(m->tm, best, end, &l) < 0) return -1;
        if (l > max_ov) return 0;
    }
    *out = best;
    return 0;
}

/* overlap_start(text, spans, measure, p, end, max_ov) -> int */
static PyObject *py_overlap_start(PyObject *mod, PyObject *args) {
    PyObject *text, *spo, *mo;
    Ix p, end, max_ov, r;
    if (!PyArg_ParseTuple(args, "UO!Onnn", &text, &SpansType, &spo, &mo, &p, &end, &max_ov)) return NULL;
    Text t;
    Meas m;
    if (meas_init(&m, mo) < 0 || sp_text((SpansObject *)spo, text, &t) < 0) return NULL;
    if (p < 0 || end > t.n) {
        text_free(&t);
        PyErr_SetString(PyExc_IndexError, "range out of text");
        return NULL;
    }
    IxVec tmp = {0};
    int rc = overlap_start(&t, (SpansObject *)spo, &m, p, end, max_ov, &tmp, &r);
    vec_free(&tmp);
    text_free(&t);
    if (rc < 0) return NULL;
    return PyLong_FromSsize_t(r);
}

/* ------------------------------------------------------------------ units (recursive.build_units) */

typedef struct {
    Py_UCS4 *v;
    Ix n;
} Sep;

typedef struct {
    const Text *t;
    Sep *seps;
    Ix nseps;
    Ix size;
    Meas *m;
    IxVec *bounds;
    IxVec *big;
} GapCtx;

static int force_split(const Text *t, Ix a, Ix b, IxVec *out) {
    Ix off = a;
    while (off < b) {
        Ix end = off + HARD_CAP;
        if (end >= b) {
            end = b;
        } else {
            Ix lo = end - 199 > off + 1 ? end - 199 : off + 1;
            Ix c1 = rfind_ch(t, '\n', lo, end), c2 = rfind_ch(t, ' ', lo, end);
            Ix cut = c1 > c2 ? c1 : c2;
            if (cut >= 0) end = cut + 1;
        }
        if (vec_push(out, end) < 0) return -1;
        off = end;
    }
    return 0;
}

static int split_gap(GapCtx *g, Ix a, Ix b, Ix si) {
    int ok;
    if (m_fits(g->m, a, b, g->size, &ok) < 0) return -1;
    if (ok) return vec_push(g->bounds, b);
    IxVec cuts = {0};
    for (Ix idx = si; idx < g->nseps; idx++) {
        Sep *sep = &g->seps[idx];
        cuts.n = 0;
        Ix last = a, pos = a;
        for (;;) {
            Ix s = find_str(g->t, sep->v, sep->n, pos, b);
            if (s < 0) break;
            Ix e = s + sep->n;
            if (s > last && vec_push(&cuts, s) < 0) goto fail;
            if (vec_push(&cuts, e) < 0) goto fail;
            last = e;
            pos = e;
        }
        if (cuts.n == 0) continue;
        if (last < b && vec_push(&cuts, b) < 0) goto fail;
        if (cuts.n <= 1) continue;
        int deeper = idx + 1 < g->nseps;
        Ix x = a;
        for (Ix c = 0; c < cuts.n; c++) {
            Ix y = cuts.v[c];
            int fits = 1;
            if (deeper && m_fits(g->m, x, y, g->size, &fits) < 0) goto fail;
            if (deeper && !fits) {
                if (split_gap(g, x, y, idx + 1) < 0) goto fail;
            } else {
                if (y - x > HARD_CAP && vec_push(g->big, g->bounds->n) < 0) goto fail;
                if (vec_push(g->bounds, y) < 0) goto fail;
            }
            x = y;
        }
        vec_free(&cuts);
        return 0;
    }
    vec_free(&cuts);
    if (b - a > HARD_CAP && vec_push(g->big, g->bounds->n) < 0) return -1;
    return vec_push(g->bounds, b);
fail:
    vec_free(&cuts);
    return -1;
}

static int build_units(GapCtx *g, const SpansObject *sp, Ix a, Ix b, IxVec *hdr_units) {
    Ix pos = a;
    Ix i = bisect_r(sp->starts, a - 1, 0, sp->n);
    for (; i < sp->n && sp->starts[i] < b; i++) {
        Ix s = sp->starts[i], e = sp->ends[i];
        if (!(s >= a && e <= b)) continue;
        if (s > pos && split_gap(g, pos, s, 0) < 0) return -1;
        if (e - s > HARD_CAP) {
            if (force_split(g->t, s, e, g->bounds) < 0) return -1;
        } else {
            if (sp->hdr[i] && vec_push(hdr_units, g->bounds->n) < 0) return -1;
            if (vec_push(g->bounds, e) < 0) return -1;
        }
        pos = e;
    }
    if (pos < b && split_gap(g, pos, b, 0) < 0) return -1;
    return 0;
}

static int cmp_ix(const void *x, const void *y) {
    Ix a = *(const Ix *)x, b = *(const Ix *)y;
    return a < b ? -1 : a > b;
}

/* ------------------------------------------------------------------ merge (recursive.split_range) */

typedef struct {
    PyObject *tracker;
    int busy;
    int ended;
    PyObject *active; /* borrowed from the last attribute read (we hold a ref) */
} Tracker;

static int tracker_update(Tracker *tr, PyObject *cls, PyObject *text, Ix s, Ix e, PyObject **unit_out) {
    /* made on first use: most ranges never leave the fast path */
    if (!tr->tracker && !(tr->tracker = PyObject_CallNoArgs(cls))) return -1;
    PyObject *unit = PyUnicode_Substring(text, s, e);
    if (!unit) return -1;
    PyObject *r = PyObject_CallMethod(tr->tracker, "update", "O", unit);
    if (!r) goto fail;
    Py_DECREF(r);
    PyObject *act = PyObject_GetAttrString(tr->tracker, "active");
    if (!act) goto fail;
    Py_XSETREF(tr->active, act);
    PyObject *pend = PyObject_GetAttrString(tr->tracker, "pending");
    if (!pend) goto fail;
    int p = PyObject_IsTrue(pend);
    Py_DECREF(pend);
    PyObject *ended = PyObject_GetAttrString(tr->tracker, "ended_this_unit");
    if (!ended) goto fail;
    int en = PyObject_IsTrue(ended);
    Py_DECREF(ended);
    int a = PyObject_IsTrue(act);
    if (p < 0 || en < 0 || a < 0) goto fail;
    tr->busy = a || p;
    tr->ended = en;
    *unit_out = unit;
    return 0;
fail:
    Py_DECREF(unit);
    return -1;
}

/* (s, e, hdr), or (s, e, hdr, ctx) when ctx is not NULL */
static int out_push(PyObject *ctx, PyObject *out, Ix s, Ix e, PyObject *hdr) {
    PyObject *tup = ctx ? Py_BuildValue("(nnOO)", s, e, hdr, ctx) : Py_BuildValue("(nnO)", s, e, hdr);
    if (!tup) return -1;
    int rc = PyList_Append(out, tup);
    Py_DECREF(tup);
    return rc;
}

/* split_ranges(text, ranges, spans, seps, size, overlap, measure, helpers, context) -> one list per
 * (a, b) range of (start, end, header) tuples, or (start, end, header, context) when context is a str.
 * helpers = (TableTracker, _header_present, _column_mismatch) from recursive.py */
static PyObject *py_split_range(PyObject *mod, PyObject *args) {
    PyObject *text, *ranges, *spo, *seps_o, *mo, *helpers, *ctxo;
    Ix size, overlap;
    if (!PyArg_ParseTuple(args, "UO!O!OnnOOO", &text, &PyList_Type, &ranges, &SpansType, &spo, &seps_o, &size,
                          &overlap, &mo, &helpers, &ctxo))
        return NULL;
    if (ctxo != Py_None && !PyUnicode_Check(ctxo)) {
        PyErr_SetString(PyExc_TypeError, "context must be None or str");
        return NULL;
    }
    Text t;
    Meas m;
    PyObject *tracker_cls, *header_present, *column_mismatch;
    if (meas_init(&m, mo) < 0 ||
        !PyArg_ParseTuple(helpers, "OOO", &tracker_cls, &header_present, &column_mismatch))
        return NULL;
    PyObject *sf = PySequence_Fast(seps_o, "separators must be a sequence");
    if (!sf) return NULL;
    if (sp_text((SpansObject *)spo, text, &t) < 0) {
        Py_DECREF(sf);
        return NULL;
    }
    PyObject *all = PyList_New(0), *out = NULL;
    const SpansObject *sp = (const SpansObject *)spo;
    PyObject *octx = ctxo == Py_None ? NULL : ctxo;
    Ix nseps = PySequence_Fast_GET_SIZE(sf);
    Sep *seps = (Sep *)PyMem_Calloc((size_t)(nseps ? nseps : 1), sizeof(Sep));
    IxVec bounds = {0}, big = {0}, hdru = {0}, specials = {0}, tmp = {0};
    Tracker tr = {0};
    PyObject *empty = PyUnicode_FromStringAndSize("", 0);
    PyObject *hdr = NULL, *unit = NULL;
    int ok = 0;
    if (!all || !seps || !empty) goto done;
    hdr = Py_NewRef(empty);
    for (Ix i = 0; i < nseps; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(sf, i);
        if (!PyUnicode_Check(s)) {
            PyErr_SetString(PyExc_TypeError, "separator must be str");
            goto done;
        }
        seps[i].v = PyUnicode_AsUCS4Copy(s);
        if (!seps[i].v) goto done;
        seps[i].n = PyUnicode_GET_LENGTH(s);
    }
    GapCtx g = {&t, seps, nseps, size, &m, &bounds, &big};
    for (Ix ri = 0; ri < PyList_GET_SIZE(ranges); ri++) {
    Ix a, b;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(ranges, ri), "nn", &a, &b)) goto done;
    Py_XSETREF(out, PyList_New(0));
    if (!out || PyList_Append(all, out) < 0) goto done;
    if (a >= b) continue;
    if (a < 0 || b > t.n) {
        PyErr_SetString(PyExc_IndexError, "range out of text");
        goto done;
    }
    bounds.n = big.n = hdru.n = specials.n = 0;
    Py_CLEAR(tr.tracker);
    Py_CLEAR(tr.active);
    tr.busy = tr.ended = 0;
    Py_SETREF(hdr, Py_NewRef(empty));
    if (build_units(&g, sp, a, b, &hdru) < 0) goto done;
    for (Ix i = 0; i < big.n; i++)
        if (vec_push(&specials, big.v[i]) < 0) goto done;
    for (Ix i = 0; i < hdru.n; i++)
        if (vec_push(&specials, hdru.v[i]) < 0) goto done;
    if (specials.n > 1) qsort(specials.v, (size_t)specials.n, sizeof(Ix), cmp_ix);
    /* big_set membership: big is ascending (appended in order) */
    Ix n = bounds.n, k = 0, sp_i = 0, cur = -1, hdr_len = 0;
    const Ix *bd = bounds.v;
    int token = m.tm != NULL;
    while (k < n) {
        if (!tr.busy) {
            while (sp_i < specials.n && specials.v[sp_i] < k) sp_i++;
            Ix stop = sp_i < specials.n ? specials.v[sp_i] : n;
            if (k < stop) {
                if (cur < 0) {
                    cur = k ? bd[k - 1] : a;
                    Py_SETREF(hdr, Py_NewRef(empty));
                    hdr_len = 0;
                    k++;
                    continue;
                }
                Ix j;
                if (m_last_fitting(&m, cur, size - hdr_len, bd, k, stop, &j) < 0) goto done;
                int hard_bound = 0;
                if (token || size > HARD_CAP) {
                    Ix jh = bisect_r(bd, cur + HARD_CAP - PyUnicode_GET_LENGTH(hdr), k, stop) - 1;
                    if (jh < j) {
                        j = jh;
                        hard_bound = 1;
                    }
                }
                if (j >= k) k = j + 1;
                if (k >= stop) continue;
                Ix u_s = bd[k - 1], u_e = bd[k];
                if (out_push(octx, out, cur, u_s, hdr) < 0) goto done;
                if (hard_bound) {
                    cur = u_s;
                } else {
                    Ix ul, mo2;
                    if (m_length(&m, u_s, u_e, &ul) < 0) goto done;
                    mo2 = overlap < size - ul ? overlap : size - ul;
                    if (overlap_start(&t, sp, &m, cur, u_s, mo2, &tmp, &cur) < 0) goto done;
                    if (token && u_e - cur > HARD_CAP) cur = u_s;
                }
                Py_SETREF(hdr, Py_NewRef(empty));
                hdr_len = 0;
                k++;
                continue;
            }
        }
        /* Unit-by-unit WeKnora loop (tables, header units, units over the hard cap). */
        Ix u_s = k ? bd[k - 1] : a, u_e = bd[k];
        Ix bi = bisect_l(big.v, k, 0, big.n);
        int is_big = bi < big.n && big.v[bi] == k;
        Py_CLEAR(unit);
        if (tracker_update(&tr, tracker_cls, text, u_s, u_e, &unit) < 0) goto done;
        if (is_big) {
            if (cur >= 0) {
                if (out_push(octx, out, cur, u_s, hdr) < 0) goto done;
                cur = -1;
                Py_SETREF(hdr, Py_NewRef(empty));
                hdr_len = 0;
            }
            IxVec pieces = {0};
            if (force_split(&t, u_s, u_e, &pieces) < 0) {
                vec_free(&pieces);
                goto done;
            }
            Ix x = u_s;
            for (Ix i = 0; i < pieces.n; i++) {
                if (out_push(octx, out, x, pieces.v[i], empty) < 0) {
                    vec_free(&pieces);
                    goto done;
                }
                x = pieces.v[i];
            }
            vec_free(&pieces);
            k++;
            continue;
        }
        if (tr.ended && cur >= 0) {
            if (out_push(octx, out, cur, u_s, hdr) < 0) goto done;
            cur = -1;
            Py_SETREF(hdr, Py_NewRef(empty));
            hdr_len = 0;
        }
        PyObject *headers = tr.active; /* str */
        if (!PyUnicode_Check(headers)) {
            PyErr_SetString(PyExc_TypeError, "tracker.active must be str");
            goto done;
        }
        Ix h_len = 0;
        if (PyUnicode_GET_LENGTH(headers)) {
            if (token) {
                if (tm_text_len(m.tm, headers, &h_len) < 0) goto done;
            } else {
                h_len = PyUnicode_GET_LENGTH(headers);
            }
        }
        if (h_len > size) {
            headers = empty;
            h_len = 0;
        }
        Py_INCREF(headers);
        Ix u_len;
        int err = m_length(&m, u_s, u_e, &u_len) < 0;
        if (!err && cur >= 0) {
            Ix cl;
            err = m_length(&m, cur, u_s, &cl) < 0;
            if (!err && cl + hdr_len + u_len + h_len > size) {
                Ix ov, cur_len;
                err = out_push(octx, out, cur, u_s, hdr) < 0;
                Ix mo2 = overlap < size - u_len ? overlap : size - u_len;
                if (!err) err = overlap_start(&t, sp, &m, cur, u_s, mo2, &tmp, &ov) < 0;
                Py_SETREF(hdr, Py_NewRef(empty));
                hdr_len = 0;
                if (!err) err = m_length(&m, ov, u_s, &cur_len) < 0;
                if (!err && PyUnicode_GET_LENGTH(headers) && h_len + u_len <= size) {
                    while (!err && ov < u_s && cur_len + u_len + h_len > size) {
                        Ix nx = bd[bisect_r(bd, ov, 0, n)];
                        ov = nx < u_s ? nx : u_s;
                        err = m_length(&m, ov, u_s, &cur_len) < 0;
                    }
                    if (!err) {
                        PyObject *ovs = PyUnicode_Substring(text, ov, u_s);
                        PyObject *r1 = ovs ? PyObject_CallFunctionObjArgs(header_present, headers, ovs, unit, NULL)
                                           : NULL;
                        Py_XDECREF(ovs);
                        int present = r1 ? PyObject_IsTrue(r1) : -1;
                        Py_XDECREF(r1);
                        int mism = 0;
                        if (present == 0) {
                            PyObject *r2 = PyObject_CallFunctionObjArgs(column_mismatch, headers, unit, NULL);
                            mism = r2 ? PyObject_IsTrue(r2) : -1;
                            Py_XDECREF(r2);
                        }
                        if (present < 0 || mism < 0)
                            err = 1;
                        else if (!present && !mism) {
                            Py_SETREF(hdr, Py_NewRef(headers));
                            hdr_len = h_len;
                        }
                    }
                }
                if (!err) cur = (ov < u_s || PyUnicode_GET_LENGTH(hdr)) ? ov : -1;
            }
        }
        Py_DECREF(headers);
        if (err) goto done;
        if (cur >= 0 && (u_e - cur) + PyUnicode_GET_LENGTH(hdr) > HARD_CAP) {
            if (out_push(octx, out, cur, u_s, hdr) < 0) goto done;
            cur = -1;
            Py_SETREF(hdr, Py_NewRef(empty));
            hdr_len = 0;
        }
        if (cur < 0) cur = u_s;
        k++;
    }
    if (cur >= 0 && out_push(octx, out, cur, b, hdr) < 0) goto done;
    }
    ok = 1;
done:
    Py_XDECREF(out);
    for (Ix i = 0; seps && i < nseps; i++) PyMem_Free(seps[i].v);
    PyMem_Free(seps);
    Py_DECREF(sf);
    vec_free(&bounds);
    vec_free(&big);
    vec_free(&hdru);
    vec_free(&specials);
    vec_free(&tmp);
    Py_XDECREF(tr.tracker);
    Py_XDECREF(tr.active);
    Py_XDECREF(unit);
    Py_XDECREF(hdr);
    Py_XDECREF(empty);
    text_free(&t);
    if (!ok) {
        Py_XDECREF(all);
        return NULL;
    }
    return all;
}

/* ------------------------------------------------------------------ pieces (__init__._pieces) */

static PyObject *NAMES[8]; /* seq, content, start, end, context_header, header_prefix_len, piece, parent_index */

/* Byte offsets of the slot attributes names[0..n) of cls (T_OBJECT_EX member descriptors, as
 * @dataclass(slots=True) makes), or 0 when some attribute is not such a slot (then use setattr). */
static int slot_offsets(PyTypeObject *cls, PyObject **names, int n, Py_ssize_t *off) {
    for (int k = 0; k < n; k++) {
        PyObject *d = _PyType_Lookup(cls, names[k]); /* borrowed */
        if (!d || !Py_IS_TYPE(d, &PyMemberDescr_Type)) return 0;
        PyMemberDef *md = ((PyMemberDescrObject *)d)->d_member;
        if (md->type != T_OBJECT_EX || (md->flags & READONLY)) return 0;
        off[k] = md->offset;
    }
    return 1;
}

/* Fill attribute k of o with the new reference v (stolen). */
static int put_attr(PyObject *o, int slots, const Py_ssize_t *off, PyObject *name, int k, PyObject *v) {
    if (!v) return -1;
    if (slots) {
        PyObject **p = (PyObject **)((char *)o + off[k]);
        Py_XSETREF(*p, v);
        return 0;
    }
    int rc = PyObject_SetAttr(o, name, v);
    Py_DECREF(v);
    return rc;
}

/* make_pieces(cls, text, chunks) -> [cls]: chunks are (start, end, header[, context_header]); the objects
 * are filled attribute by attribute in dataclass field order, as cls.__init__ would (no __post_init__). */
static PyObject *py_make_pieces(PyObject *mod, PyObject *args) {
    PyTypeObject *cls;
    PyObject *text, *chunks;
    if (!PyArg_ParseTuple(args, "O!UO!", &PyType_Type, &cls, &text, &PyList_Type, &chunks)) return NULL;
    Ix n = PyList_GET_SIZE(chunks), tl = PyUnicode_GET_LENGTH(text);
    Py_ssize_t off[6];
    int slots = slot_offsets(cls, NAMES, 6, off);
    PyObject *out = PyList_New(n);
    PyObject *empty = PyUnicode_FromStringAndSize("", 0);
    if (!out || !empty) goto fail;
    for (Ix i = 0; i < n; i++) {
        PyObject *c = PyList_GET_ITEM(chunks, i);
        if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) < 3) {
            PyErr_SetString(PyExc_TypeError, "chunk must be a tuple (start, end, header[, context])");
            goto fail;
        }
        Ix s = PyLong_AsSsize_t(PyTuple_GET_ITEM(c, 0)), e = PyLong_AsSsize_t(PyTuple_GET_ITEM(c, 1));
        if (PyErr_Occurred()) goto fail;
        if (s < 0 || e > tl || s > e) {
            PyErr_SetString(PyExc_IndexError, "chunk outside the text");
            goto fail;
        }
        PyObject *h = PyTuple_GET_ITEM(c, 2);
        PyObject *ctx = PyTuple_GET_SIZE(c) > 3 ? PyTuple_GET_ITEM(c, 3) : empty;
        if (!PyUnicode_Check(h)) {
            PyErr_SetString(PyExc_TypeError, "header must be str");
            goto fail;
        }
        PyObject *content = PyUnicode_Substring(text, s, e);
        if (!content) goto fail;
        Ix hl = PyUnicode_GET_LENGTH(h);
        if (hl) {
            PyObject *cc = PyUnicode_Concat(h, content);
            Py_DECREF(content);
            if (!cc) goto fail;
            content = cc;
        }
        PyObject *o = cls->tp_alloc(cls, 0);
        if (!o) {
            Py_DECREF(content);
            goto fail;
        }
        PyList_SET_ITEM(out, i, o);
        if (put_attr(o, slots, off, NAMES[0], 0, PyLong_FromSsize_t(i)) < 0 ||
            put_attr(o, slots, off, NAMES[1], 1, content) < 0 ||
            put_attr(o, slots, off, NAMES[2], 2, PyLong_FromSsize_t(s)) < 0 ||
            put_attr(o, slots, off, NAMES[3], 3, PyLong_FromSsize_t(e)) < 0 ||
            put_attr(o, slots, off, NAMES[4], 4, Py_NewRef(ctx)) < 0 ||
            put_attr(o, slots, off, NAMES[5], 5, PyLong_FromSsize_t(hl)) < 0)
            goto fail;
    }
    Py_DECREF(empty);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(empty);
    return NULL;
}

/* assemble(text, parents, subs, merge) -> (kept_parents, children, parent_of): __init__._parent_child's
 * loop. A parent is kept unless its only child is identical to it (header + source); children of a parent
 * with a breadcrumb get merge(parent_crumb, child_crumb). */
static PyObject *py_assemble(PyObject *mod, PyObject *args) {
    PyObject *text, *parents, *subs, *merge;
    if (!PyArg_ParseTuple(args, "UO!O!O", &text, &PyList_Type, &parents, &PyList_Type, &subs, &merge)) return NULL;
    Ix np = PyList_GET_SIZE(parents);
    if (PyList_GET_SIZE(subs) != np) {
        PyErr_SetString(PyExc_ValueError, "one list of children per parent expected");
        return NULL;
    }
    PyObject *kept = PyList_New(0), *children = PyList_New(0), *parent_of = PyList_New(0);
    if (!kept || !children || !parent_of) goto fail;
    for (Ix i = 0; i < np; i++) {
        PyObject *par = PyList_GET_ITEM(parents, i), *ch = PyList_GET_ITEM(subs, i);
        Ix ps, pe;
        PyObject *ph, *pcrumb;
        if (!PyList_Check(ch) || !PyArg_ParseTuple(par, "nnUU", &ps, &pe, &ph, &pcrumb)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "children must be lists");
            goto fail;
        }
        Ix nc = PyList_GET_SIZE(ch);
        int keep = nc > 1;
        if (nc == 1) {
            Ix cs, ce;
            PyObject *chh, *cc;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(ch, 0), "nnUU", &cs, &ce, &chh, &cc)) goto fail;
            PyObject *a1 = PyUnicode_Substring(text, cs, ce), *a2 = PyUnicode_Substring(text, ps, pe);
            PyObject *x = a1 ? PyUnicode_Concat(chh, a1) : NULL, *y = a2 ? PyUnicode_Concat(ph, a2) : NULL;
            Py_XDECREF(a1);
            Py_XDECREF(a2);
            int eq = x && y ? PyUnicode_Compare(x, y) : -2;
            Py_XDECREF(x);
            Py_XDECREF(y);
            if (eq == -2 || (eq == -1 && PyErr_Occurred())) goto fail;
            keep = eq != 0;
        }
        Ix index = -1;
        if (keep) {
            index = PyList_GET_SIZE(kept);
            if (PyList_Append(kept, par) < 0) goto fail;
        }
        PyObject *idx = PyLong_FromSsize_t(index);
        if (!idx) goto fail;
        for (Ix j = 0; j < nc; j++) {
            PyObject *c = PyList_GET_ITEM(ch, j);
            int rc;
            if (PyUnicode_GET_LENGTH(pcrumb)) {
                if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) != 4) {
                    PyErr_SetString(PyExc_TypeError, "child must be (start, end, header, context)");
                    rc = -1;
                } else {
                    PyObject *m = PyObject_CallFunctionObjArgs(merge, pcrumb, PyTuple_GET_ITEM(c, 3), NULL);
                    PyObject *t = m ? PyTuple_Pack(4, PyTuple_GET_ITEM(c, 0), PyTuple_GET_ITEM(c, 1),
                                                   PyTuple_GET_ITEM(c, 2), m)
                                    : NULL;
                    Py_XDECREF(m);
                    rc = t ? PyList_Append(children, t) : -1;
                    Py_XDECREF(t);
                }
            } else {
                rc = PyList_Append(children, c);
            }
            if (rc < 0 || PyList_Append(parent_of, idx) < 0) {
                Py_DECREF(idx);
                goto fail;
            }
        }
        Py_DECREF(idx);
    }
    return Py_BuildValue("(NNN)", kept, children, parent_of);
fail:
    Py_XDECREF(kept);
    Py_XDECREF(children);
    Py_XDECREF(parent_of);
    return NULL;
}

/* make_children(cls, pieces, parent_indices) -> [cls(piece=..., parent_index=...)] */
static PyObject *py_make_children(PyObject *mod, PyObject *args) {
    PyTypeObject *cls;
    PyObject *pieces, *idx;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyType_Type, &cls, &PyList_Type, &pieces, &PyList_Type, &idx))
        return NULL;
    Ix n = PyList_GET_SIZE(pieces);
    if (PyList_GET_SIZE(idx) != n) {
        PyErr_SetString(PyExc_ValueError, "pieces and parent indices differ in length");
        return NULL;
    }
    Py_ssize_t off[2];
    int slots = slot_offsets(cls, NAMES + 6, 2, off);
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Ix i = 0; i < n; i++) {
        PyObject *o = cls->tp_alloc(cls, 0);
        if (!o) goto fail;
        PyList_SET_ITEM(out, i, o);
        if (put_attr(o, slots, off, NAMES[6], 0, Py_NewRef(PyList_GET_ITEM(pieces, i))) < 0 ||
            put_attr(o, slots, off, NAMES[7], 1, Py_NewRef(PyList_GET_ITEM(idx, i))) < 0)
            goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ profiler line scan (profile.py)
 * One pass over the lines of a text doing what Lines / profile_document do with FENCE_LINE, MARKERS and
 * TABLE_LINE plus the line-length statistics. Each matcher below is the regex it replaces with the
 * backtracking worked out (comments give the regex); the differential tests compare both paths. */

typedef struct {
    int kind;
    const void *data;
    Ix n;
} LTxt;

#define LAT(u, i) PyUnicode_READ((u)->kind, (u)->data, (i))

static inline int l_h(Py_UCS4 c) { return c == ' ' || c == '\t' || c == '\f' || c == '\r'; } /* _H */
static inline int l_st(Py_UCS4 c) { return c == ' ' || c == '\t'; }
static inline int l_ws5(Py_UCS4 c) { return c == ' ' || c == '\t' || c == '\f' || c == '\r' || c == '\v'; }
static inline int l_ivx(Py_UCS4 c) { return c == 'I' || c == 'V' || c == 'X'; }
static inline int l_capsfirst(Py_UCS4 c) { return (c >= 'A' && c <= 'Z') || c == 0xC4 || c == 0xD6 || c == 0xDC; }

static Ix l_skip_st(const LTxt *u, Ix i, Ix e) {
    while (i < e && l_st(LAT(u, i))) i++;
    return i;
}
static Ix l_skip_h(const LTxt *u, Ix i, Ix e) {
    while (i < e && l_h(LAT(u, i))) i++;
    return i;
}
static Ix l_skip_dec(const LTxt *u, Ix i, Ix e) { /* \d+ (Unicode decimal, as sre) */
    while (i < e && Py_UNICODE_ISDECIMAL(LAT(u, i))) i++;
    return i;
}
/* exact ASCII literal at i: end index or -1 */
static Ix l_lit(const LTxt *u, Ix i, Ix e, const char *w) {
    for (; *w; w++, i++)
        if (i >= e || LAT(u, i) != (Py_UCS4)(unsigned char)*w) return -1;
    return i;
}
/* case-insensitive literal (lowercase ASCII w) as sre's IGNORECASE: s also matches U+017F, i also U+0130/U+0131 */
static Ix l_cilit(const LTxt *u, Ix i, Ix e, const char *w) {
    for (; *w; w++, i++) {
        if (i >= e) return -1;
        Py_UCS4 c = LAT(u, i), lw = (Py_UCS4)(unsigned char)*w;
        if (c == lw || c == lw - 32) continue;
        if (lw == 's' && c == 0x17F) continue;
        if (lw == 'i' && (c == 0x130 || c == 0x131)) continue;
        return -1;
    }
    return i;
}

/* (?:Kapitel|Abschnitt|Teil)[ \t\f\r]+(?:[0-9]+|[IVX]{1,5})[\.: ].{0,200}$ from f (words: one set) */
static int l_chapter(const LTxt *u, Ix f, Ix e, const char *const *words) {
    for (; *words; words++) {
        Ix j = l_lit(u, f, e, *words);
        if (j < 0) continue; /* the words start with distinct letters: at most one applies */
        Ix k = l_skip_h(u, j, e);
        if (k == j || k >= e) return 0;
        Py_UCS4 c = LAT(u, k);
        Ix m = k;
        if (c >= '0' && c <= '9') {
            while (m < e && LAT(u, m) >= '0' && LAT(u, m) <= '9') m++;
        } else if (l_ivx(c)) {
            while (m < e && l_ivx(LAT(u, m))) m++;
            if (m - k > 5) return 0;
        } else {
            return 0;
        }
        if (m >= e) return 0;
        c = LAT(u, m);
        if (c != '.' && c != ':' && c != ' ') return 0;
        return e - (m + 1) <= 200;
    }
    return 0;
}

static inline int l_zhnum(Py_UCS4 c) {
    return (c >= '0' && c <= '9') || c == 0x4E00 || c == 0x4E8C || c == 0x4E09 || c == 0x56DB || c == 0x4E94 ||
           c == 0x516D || c == 0x4E03 || c == 0x516B || c == 0x4E5D || c == 0x5341 || c == 0x767E || c == 0x5343 ||
           c == 0x96F6 || c == 0x3007;
}

/* 第[ \t]*[一二三四五六七八九十百千零〇0-9]+[ \t]*(?:章|节|節|部分|篇)[ \t]?.{0,200}$ */
static int l_zh(const LTxt *u, Ix f, Ix e) {
    if (LAT(u, f) != 0x7B2C) return 0;
    Ix j = l_skip_st(u, f + 1, e), k = j;
    while (k < e && l_zhnum(LAT(u, k))) k++;
    if (k == j) return 0;
    k = l_skip_st(u, k, e);
    if (k >= e) return 0;
    Py_UCS4 c = LAT(u, k);
    if (c == 0x7AE0 || c == 0x8282 || c == 0x7BC0 || c == 0x7BC7) {
        k += 1;
    } else if (c == 0x90E8 && k + 1 < e && LAT(u, k + 1) == 0x5206) {
        k += 2;
    } else {
        return 0;
    }
    Ix rest = e - k;
    return rest <= 200 || (rest == 201 && l_st(LAT(u, k)));
}

/* [ \t]+\S.{0,200}$ at q */
static int l_num_tail(const LTxt *u, Ix q, Ix e) {
    if (q >= e || !l_st(LAT(u, q))) return 0;
    Ix r = l_skip_st(u, q, e);
    if (r >= e || Py_UNICODE_ISSPACE(LAT(u, r))) return 0;
    return e - (r + 1) <= 200;
}

/* (?:\d+(?:\.\d+){1,3}\.?|(?:\d+|[IVX]{1,5})\.)[ \t]+\S.{0,200}$ */
static int l_num(const LTxt *u, Ix f, Ix e) {
    Py_UCS4 c = LAT(u, f);
    if (Py_UNICODE_ISDECIMAL(c)) {
        Ix m0 = l_skip_dec(u, f, e), p = m0;
        int groups = 0;
        while (groups < 3 && p + 1 < e && LAT(u, p) == '.' && Py_UNICODE_ISDECIMAL(LAT(u, p + 1))) {
            p = l_skip_dec(u, p + 1, e);
            groups++;
        }
        /* only the greedy (longest) group count can be followed by blanks; `\.?` tried with, then without */
        if (groups && l_num_tail(u, (p < e && LAT(u, p) == '.') ? p + 1 : p, e)) return 1;
        return m0 < e && LAT(u, m0) == '.' && l_num_tail(u, m0 + 1, e);
    }
    if (l_ivx(c)) {
        Ix m = f;
        while (m < e && l_ivx(LAT(u, m))) m++;
        return m - f <= 5 && m < e && LAT(u, m) == '.' && l_num_tail(u, m + 1, e);
    }
    return 0;
}

static inline int l_capsbody(Py_UCS4 c) { return l_capsfirst(c) || c == ' ' || c == '-'; }

/* (?:[A-ZÄÖÜ][A-ZÄÖÜ \-]{3,80}):?[ \t\f\r]*$ */
static int l_caps(const LTxt *u, Ix f, Ix e) {
    if (!l_capsfirst(LAT(u, f))) return 0;
    Ix s = f + 1;
    while (s < e && l_capsbody(LAT(u, s))) s++;
    Ix r = s - (f + 1), t = 0;
    while (t < r && LAT(u, s - 1 - t) == ' ') t++;
    Ix lo = r - t > 3 ? r - t : 3, hi = r < 80 ? r : 80;
    if (lo > hi) return 0;
    if (r <= 80) { /* the body takes the whole run: `:?` then blanks */
        Ix k = s;
        if (k < e && LAT(u, k) == ':') k++;
        if (l_skip_h(u, k, e) == e) return 1;
    }
    /* a shorter body leaves trailing spaces of the run to the blanks: no colon possible */
    return lo < r && l_skip_h(u, s, e) == e;
}

/* (?:-{3,}|={3,}|\*{3,}|_{3,})[ \t]*$ */
static int l_sep(const LTxt *u, Ix f, Ix e) {
    Py_UCS4 c = LAT(u, f);
    if (c != '-' && c != '=' && c != '*' && c != '_') return 0;
    Ix m = f;
    while (m < e && LAT(u, m) == c) m++;
    return m - f >= 3 && l_skip_st(u, m, e) == e;
}

/* (?i:(?:Seite|Page|页码?)[ \t\f\r]+\d+(?:[ \t\f\r]*(?:von|of|/)[ \t\f\r]*\d+)?[ \t]*$) */
static int l_foot(const LTxt *u, Ix f, Ix e) {
    Ix j = l_cilit(u, f, e, "seite");
    if (j < 0) j = l_cilit(u, f, e, "page");
    if (j < 0 && LAT(u, f) == 0x9875) j = (f + 1 < e && LAT(u, f + 1) == 0x7801) ? f + 2 : f + 1;
    if (j < 0) return 0;
    Ix k = l_skip_h(u, j, e);
    if (k == j) return 0;
    Ix m = l_skip_dec(u, k, e);
    if (m == k) return 0;
    Ix g = l_skip_h(u, m, e), w = -1;
    if (g < e) {
        w = l_cilit(u, g, e, "von");
        if (w < 0) w = l_cilit(u, g, e, "of");
        if (w < 0 && LAT(u, g) == '/') w = g + 1;
    }
    if (w >= 0) {
        Ix d = l_skip_h(u, w, e), d2 = l_skip_dec(u, d, e);
        if (d2 > d && l_skip_st(u, d2, e) == e) return 1;
    }
    return l_skip_st(u, m, e) == e;
}

static const char *const L_DE[] = {"Kapitel", "Abschnitt", "Teil", NULL};
static const char *const L_EN[] = {"Chapter", "Section", "Part", NULL};
static PyObject *L_KIND[7]; /* de en zh num caps sep foot (profile.MARKER_KINDS) */

/* MARKERS on the line [i, e): kind index or -1 */
static int l_marker(const LTxt *u, Ix i, Ix e) {
    Ix f = l_skip_st(u, i, e);
    if (f >= e) return -1;
    Py_UCS4 c = LAT(u, f);
    if (!((c >= '0' && c <= '9') || l_capsfirst(c) || c == '-' || c == '=' || c == '*' || c == '_' || c == 0x7B2C ||
          c == 0x9875 || c == 's' || c == 'p'))
        return -1;
    if (l_chapter(u, f, e, L_DE)) return 0;
    if (l_chapter(u, f, e, L_EN)) return 1;
    if (l_zh(u, f, e)) return 2;
    if (l_num(u, f, e)) return 3;
    if (l_caps(u, f, e)) return 4;
    if (l_sep(u, f, e)) return 5;
    if (l_foot(u, f, e)) return 6;
    return -1;
}

/* lang_counts(sample) -> (CJK runes, Latin runes) as profile.detect_language counts them */
static PyObject *py_lang_counts(PyObject *mod, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "text must be str");
        return NULL;
    }
    LTxt u = {PyUnicode_KIND(arg), PyUnicode_DATA(arg), PyUnicode_GET_LENGTH(arg)};
    Ix cjk = 0, latin = 0;
    for (Ix i = 0; i < u.n; i++) {
        Py_UCS4 c = LAT(&u, i);
        if (c < 0x80) {
            latin += (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
        } else if (c < 0x100) {
            latin += c == 0xE4 || c == 0xF6 || c == 0xFC || c == 0xC4 || c == 0xD6 || c == 0xDC || c == 0xDF;
        } else {
            cjk += (c >= 0x1100 && c <= 0x11FF) || (c >= 0x3040 && c <= 0x30FF) || (c >= 0x3130 && c <= 0x318F) ||
                   (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF) ||
                   (c >= 0xF900 && c <= 0xFAFF);
        }
    }
    return Py_BuildValue("(nn)", cjk, latin);
}

/* HEADING on the line [i, e): (#{1,6})[ \t\f\r]+(.+?)[ \t\f\r]*#*[ \t\f\r]*$ -> level (0: none) and the
 * title group [*ts, *te). The lazy title ends where the longest blank/#/blank suffix starts (at least one
 * rune); a line of only blanks after the hashes gives its last blank to the title when the run has two. */
static int l_heading(const LTxt *u, Ix i, Ix e, Ix *ts, Ix *te) {
    Ix h = i;
    while (h < e && LAT(u, h) == '#') h++;
    if (h == i || h - i > 6 || h >= e || !l_h(LAT(u, h))) return 0;
    Ix w = l_skip_h(u, h, e);
    if (w == e) {
        if (w - h < 2) return 0;
        *ts = w - 1;
        *te = w;
        return (int)(h - i);
    }
    Ix z = e;
    while (z > w && l_h(LAT(u, z - 1))) z--;
    while (z > w && LAT(u, z - 1) == '#') z--;
    while (z > w && l_h(LAT(u, z - 1))) z--;
    *ts = w;
    *te = z > w + 1 ? z : w + 1;
    return (int)(h - i);
}

/* first index >= i of rune ch in a 2- or 4-byte text (n when absent); SSE2 compares 8 or 4 runes at once */
static Ix l_find2(const Py_UCS2 *d, Ix i, Ix n, Py_UCS2 ch) {
#if defined(__SSE2__)
    const __m128i needle = _mm_set1_epi16((short)ch);
    for (; i + 8 <= n; i += 8) {
        int mask = _mm_movemask_epi8(_mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *)(d + i)), needle));
        if (mask) return i + (__builtin_ctz((unsigned)mask) >> 1);
    }
#endif
    while (i < n && d[i] != ch) i++;
    return i;
}
static Ix l_find4(const Py_UCS4 *d, Ix i, Ix n, Py_UCS4 ch) {
#if defined(__SSE2__)
    const __m128i needle = _mm_set1_epi32((int)ch);
    for (; i + 4 <= n; i += 4) {
        int mask = _mm_movemask_epi8(_mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(d + i)), needle));
        if (mask) return i + (__builtin_ctz((unsigned)mask) >> 2);
    }
#endif
    while (i < n && d[i] != ch) i++;
    return i;
}

static Ix l_find(const LTxt *u, Ix i, Py_UCS4 ch) {
    if (u->kind == PyUnicode_1BYTE_KIND) {
        const char *d = (const char *)u->data;
        const char *p = memchr(d + i, (int)ch, (size_t)(u->n - i));
        return p ? (Ix)(p - d) : u->n;
    }
    if (u->kind == PyUnicode_2BYTE_KIND) return l_find2((const Py_UCS2 *)u->data, i, u->n, (Py_UCS2)ch);
    return l_find4((const Py_UCS4 *)u->data, i, u->n, ch);
}

static Ix l_eol(const LTxt *u, Ix i) { return l_find(u, i, '\n'); }

static int l_append_ix(PyObject *list, Ix v) {
    PyObject *o = PyLong_FromSsize_t(v);
    if (!o) return -1;
    int r = PyList_Append(list, o);
    Py_DECREF(o);
    return r;
}

/* scan_lines(text) -> (fence line starts, [(line start, marker kind)], has_table, kept line lengths as
 * float64 bytes, code_chars, n_lines, text.count("\f"), text.count("\n\n\n"), [(line start, heading level,
 * raw title)], ends of the runs of 3+ newlines) -- fenced lines (fence lines included) are skipped for
 * markers, headings, tables and the kept lengths */
static PyObject *py_scan_lines(PyObject *mod, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "text must be str");
        return NULL;
    }
    LTxt u = {PyUnicode_KIND(arg), PyUnicode_DATA(arg), PyUnicode_GET_LENGTH(arg)};
    Ix n_lines = 0, cap = 1024;
    double *kept = (double *)PyMem_Malloc(sizeof(double) * (size_t)cap);
    PyObject *fences = PyList_New(0), *markers = PyList_New(0), *heads = PyList_New(0), *blanks = PyList_New(0);
    if (!kept || !fences || !markers || !heads || !blanks) goto fail;
    Ix nk = 0, code = 0, pend = 0, last_len = 0, run = 0, nl3 = 0, ff = 0;
    int in_fence = 0, has_table = 0, opened_here = 0;
    for (Ix i = 0;; i++) {
        Ix e = l_eol(&u, i), len = e - i;
        n_lines++;
        /* text.count("\n\n\n"): a run of k newlines holds k // 3 non-overlapping matches */
        if (len > 0) {
            nl3 += run / 3;
            if (run >= 3 && l_append_ix(blanks, i) < 0) goto fail;
            run = 0;
        }
        if (e < u.n) run++;
        Ix f5 = i;
        while (f5 < e && l_ws5(LAT(&u, f5))) f5++;
        if (l_lit(&u, f5, e, "```") >= 0) {
            PyObject *o = PyLong_FromSsize_t(i);
            if (!o || PyList_Append(fences, o) < 0) {
                Py_XDECREF(o);
                goto fail;
            }
            Py_DECREF(o);
            if (in_fence) code += pend;
            in_fence = !in_fence;
            pend = last_len = 0;
            opened_here = 1;
        } else if (in_fence) {
            pend += len;
            last_len = len;
            opened_here = 0;
        } else {
            if (nk == cap) {
                double *grown = (double *)PyMem_Realloc(kept, sizeof(double) * (size_t)(cap *= 2));
                if (!grown) goto fail;
                kept = grown;
            }
            kept[nk++] = (double)len;
            if (!has_table && f5 < e && LAT(&u, f5) == '|') {
                Ix z = e;
                while (z > f5 && l_ws5(LAT(&u, z - 1))) z--;
                has_table = LAT(&u, z - 1) == '|';
            }
            Ix ts, te;
            int level = LAT(&u, i) == '#' ? l_heading(&u, i, e, &ts, &te) : 0;
            if (level) {
                PyObject *title = PyUnicode_Substring(arg, ts, te);
                PyObject *o = title ? Py_BuildValue("(niN)", i, level, title) : NULL;
                if (!o || PyList_Append(heads, o) < 0) {
                    Py_XDECREF(o);
                    goto fail;
                }
                Py_DECREF(o);
            }
            int k = l_marker(&u, i, e);
            if (k >= 0) {
                PyObject *o = Py_BuildValue("(nO)", i, L_KIND[k]);
                if (!o || PyList_Append(markers, o) < 0) {
                    Py_XDECREF(o);
                    goto fail;
                }
                Py_DECREF(o);
            }
        }
        if (e >= u.n) break;
        i = e;
    }
    nl3 += run / 3;
    if (run >= 3 && l_append_ix(blanks, u.n) < 0) goto fail;
    /* unclosed: profile.py counts the lines strictly between the fence and the last line */
    if (in_fence && !opened_here) code += pend - last_len;
    for (Ix i = 0; (i = l_find(&u, i, '\f')) < u.n; i++) ff++;
    PyObject *buf = PyBytes_FromStringAndSize((const char *)kept, (Py_ssize_t)(sizeof(double) * (size_t)nk));
    PyMem_Free(kept);
    if (!buf) {
        Py_DECREF(fences);
        Py_DECREF(markers);
        Py_DECREF(heads);
        Py_DECREF(blanks);
        return NULL;
    }
    return Py_BuildValue("(NNONnnnnNN)", fences, markers, has_table ? Py_True : Py_False, buf, code, n_lines, ff, nl3,
                         heads, blanks);
fail:
    PyMem_Free(kept);
    Py_XDECREF(fences);
    Py_XDECREF(markers);
    Py_XDECREF(heads);
    Py_XDECREF(blanks);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return NULL;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"find_spans", py_find_spans, METH_O, "find_spans(text) -> (starts, ends, header_starts, Spans)"},
    {"spans_from_lists", py_spans_from_lists, METH_VARARGS, "spans_from_lists(starts, ends, headers) -> Spans"},
    {"overlap_start", py_overlap_start, METH_VARARGS, "overlap_start(text, spans, measure, p, end, max_ov)"},
    {"split_ranges", py_split_range, METH_VARARGS,
     "split_ranges(text, ranges, spans, seps, size, overlap, measure, helpers, context) -> [[(s, e, hdr)]]"},
    {"make_pieces", py_make_pieces, METH_VARARGS, "make_pieces(cls, text, chunks) -> [cls]"},
    {"assemble", py_assemble, METH_VARARGS, "assemble(text, parents, subs, merge) -> (kept, children, parent_of)"},
    {"make_children", py_make_children, METH_VARARGS, "make_children(cls, pieces, parent_indices) -> [cls]"},
    {"scan_lines", py_scan_lines, METH_O,
     "scan_lines(text) -> (fences, [(line start, marker kind)], has_table, kept lens f64, code, lines, ff, nl3, heads, blank ends)"},
    {"lang_counts", py_lang_counts, METH_O, "lang_counts(sample) -> (CJK runes, Latin runes)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_native", "Native chunker hot paths.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&SpansType) < 0 || PyType_Ready(&TokMeasureType) < 0 || PyType_Ready(&SegCacheType) < 0)
        return NULL;
    static const char *names[8] = {"seq",  "content", "start", "end", "context_header", "header_prefix_len",
                                   "piece", "parent_index"};
    for (int k = 0; k < 8; k++)
        if (!NAMES[k] && !(NAMES[k] = PyUnicode_InternFromString(names[k]))) return NULL;
    static const char *kinds[7] = {"de", "en", "zh", "num", "caps", "sep", "foot"};
    for (int k = 0; k < 7; k++)
        if (!L_KIND[k] && !(L_KIND[k] = PyUnicode_InternFromString(kinds[k]))) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    Py_INCREF(&SpansType);
    Py_INCREF(&TokMeasureType);
    Py_INCREF(&SegCacheType);
    if (PyModule_AddObject(m, "SegCache", (PyObject *)&SegCacheType) < 0 ||
        PyModule_AddObject(m, "Spans", (PyObject *)&SpansType) < 0 ||
        PyModule_AddObject(m, "TokMeasure", (PyObject *)&TokMeasureType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
