/*
 * _kineto: a columnar decoder for the events array of a Kineto (Chrome) trace.
 *
 * It does the work of reader.py's msgspec decode plus columns.py's column builders in one pass
 * over the bytes, without creating a Python object per event, and with the GIL released, so two
 * threads can decode two halves of a trace while the main thread imports the analysis modules.
 *
 * Contract with the Python side (native.py):
 *   - It decodes only what it can decode exactly as the Python path does. Anything else (a syntax
 *     error, a cut-off file, a lone surrogate, invalid UTF-8, a value of another type than
 *     schema.py allows for its key (a bool where a number belongs, an id beyond int64: types_ok),
 *     a key with escapes, nesting MAX_DEPTH deep, an event over MAX_EVENT_BYTES...) raises
 *     Unsupported, and the caller reads the whole file with the Python path, which knows how to
 *     warn about and salvage damage.
 *   - Events whose category it does not table (metadata, unknown categories) are handed back as
 *     their JSON text ("punted") for the Python path; those families never mix with the ones
 *     decoded here, so every table keeps file order.
 *   - Columns are exported in columns.py's layout (names, dtypes, order), names as interned raw
 *     JSON string bodies in order of first appearance. Times are exported as read: columns.py
 *     drops bad ones and clamps negative durations when it builds the tables, for both paths.
 *
 * Times: Kineto writes microseconds with three decimals (format doc section 1.4). A number with at
 * most three decimals and no exponent is converted to nanoseconds from its digits, exactly; any
 * other number goes through a double and the same floor/rint formula as columns._us_to_ns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* reader.MAX_DEPTH and reader.MAX_EVENT_BYTES (tests/test_native.py checks they agree) */
#define MAX_DEPTH 64
#define MAX_EVENT_BYTES ((size_t)16 << 20)
#define MISSING_TIME INT64_MIN
#define ABSURD_US 9.0e15

/* ---------------------------------------------------------------------------------------------- */
/* growable buffers                                                                                 */

typedef struct {
    char *data;
    size_t len; /* bytes */
    size_t cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *d = (char *)realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n)) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

#define PUT(b, T, v)                          \
    do {                                      \
        T _v = (v);                           \
        if (buf_put((b), &_v, sizeof(T))) return -1; \
    } while (0)

/* ---------------------------------------------------------------------------------------------- */
/* values as the scanner sees them                                                                  */

enum { V_NONE = 0, V_NULL, V_INT, V_NUM, V_STR, V_STRE, V_TRUE, V_FALSE, V_ARR, V_OBJ };

typedef struct {
    const char *s; /* strings: the body between the quotes; others: the whole token */
    size_t n;
    int t;
} Val;

/* event keys */
enum { E_PH, E_CAT, E_NAME, E_PID, E_TID, E_TS, E_DUR, E_ID, E_ARGS, E_COUNT };

/* args keys (schema.Args) */
enum {
    A_EXT_ID, A_EXT_ID_LOWER, A_CORRELATION, A_STREAM, A_DEVICE, A_CBID, A_CID,
    A_GRID, A_BLOCK, A_REGISTERS, A_SHARED_MEM, A_BLOCKS_PER_SM, A_WARPS_PER_SM, A_OCCUPANCY,
    A_GRAPH_ID, A_BYTES, A_SIZE, A_INPUT_DIMS, A_INPUT_TYPE, A_CONCRETE, A_SEQ_NR, A_FWD_TID,
    A_RF_ID, A_FINISHED, A_PY_ID, A_PY_PARENT, A_PY_MODULE, A_WAIT_STREAM, A_WAIT_EVENT,
    A_MEM_BYTES, A_TOTAL_ALLOC, A_TOTAL_RESERVED, A_DEVICE_TYPE, A_DEVICE_ID, A_COLL_NAME,
    A_IN_NELEMS, A_OUT_NELEMS, A_GROUP_SIZE, A_DTYPE, A_PG_NAME, A_PG_NAME_OLD, A_PG_RANKS, A_SEQ,
    A_COUNT
};

static const char *ARG_KEYS[A_COUNT] = {
    "External id", "external id", "correlation", "stream", "device", "cbid", "cid",
    "grid", "block", "registers per thread", "shared memory", "blocks per SM", "warps per SM",
    "est. achieved occupancy %", "graph id", "bytes", "size", "Input Dims", "Input type",
    "Concrete Inputs", "Sequence number", "Fwd thread id", "Record function id", "finished",
    "Python id", "Python parent id", "Python module id", "wait_on_stream",
    "wait_on_cuda_event_record_corr_id", "Bytes", "Total Allocated", "Total Reserved",
    "Device Type", "Device Id", "Collective name", "In msg nelems", "Out msg nelems", "Group size",
    "dtype", "Process Group Name", "Process Group ID", "Process Group Ranks", "Seq",
};
static size_t ARG_LENS[A_COUNT];

static const char *EVENT_KEYS[E_COUNT] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"};

/* ---------------------------------------------------------------------------------------------- */
/* families and their columns (columns.py's builders, same names and order)                         */

enum { F_HOST, F_FRAMES, F_RUNTIME, F_GPU, F_GPU_ANN, F_SYNCS, F_MEMORY, F_OVERHEAD, F_FLOWS,
       F_COLLECTIVES, F_COUNT, F_LAUNCH_FLOWS = 100 };

static const char *FAMILY_NAMES[F_COUNT] = {"host", "frames", "runtime", "gpu", "gpu_annotations",
                                            "syncs", "memory", "overhead", "flows", "collectives"};

/* column kinds: q int64, d float64, i int32 (name codes), b int8, ? bool, R raw JSON (bytes or
 * None), S string body (bytes or None; escapes decoded in Python) */
typedef struct {
    const char *name;
    char kind;
} ColSpec;

static const ColSpec HOST_COLS[] = {
    {"ts_ns", 'q'}, {"dur_ns", 'q'}, {"name", 'i'}, {"is_annotation", '?'}, {"pid", 'q'}, {"tid", 'q'},
    {"ext_id", 'q'}, {"seq_nr", 'q'}, {"fwd_tid", 'q'}, {"rf_id", 'q'}, {"unfinished", '?'},
    {"input_dims", 'R'}, {"input_types", 'R'}, {"concrete_inputs", 'R'}, {NULL, 0}};
static const ColSpec FRAMES_COLS[] = {
    {"ts_ns", 'q'}, {"dur_ns", 'q'}, {"name", 'i'}, {"pid", 'q'}, {"tid", 'q'},
    {"py_id", 'q'}, {"py_parent", 'q'}, {"module_id", 'q'}, {NULL, 0}};
static const ColSpec RUNTIME_COLS[] = {
    {"ts_ns", 'q'}, {"dur_ns", 'q'}, {"name", 'i'}, {"is_driver", '?'}, {"pid", 'q'}, {"tid", 'q'},
    {"correlation", 'q'}, {"ext_id", 'q'}, {"cbid", 'q'}, {"stream_arg", 'q'}, {NULL, 0}};
static const ColSpec GPU_COLS[] = {
    {"ts_ns", 'q'}, {"dur_ns", 'q'}, {"name", 'i'}, {"kind", 'b'}, {"device", 'q'}, {"stream", 'q'},
    {"correlation", 'q'}, {"ext_id", 'q'}, {"grid_x", 'q'}, {"grid_y", 'q'}, {"grid_z", 'q'},
    {"block_x", 'q'}, {"block_y", 'q'}, {"block_z", 'q'}, {"registers", 'd'}, {"shared_mem", 'd'},
    {"blocks_per_sm", 'd'}, {"warps_per_sm", 'd'}, {"occupancy_pct", 'd'}, {"graph_id", 'q'},
    {"bytes", 'd'}, {NULL, 0}};
static const ColSpec GPU_ANN_COLS[] = {
    {"ts_ns", 'q'}, {"dur_ns", 'q'}, {"name", 'i'}, {"device", 'q'}, {"stream", 'q'}, {"ext_id", 'q'},
    {NULL, 0}};
static const ColSpec SYNCS_COLS[] = {
    {"ts_ns", 'q'}, {"dur_ns", 'q'}, {"name", 'i'}, {"device", 'q'}, {"stream", 'q'},
    {"correlation", 'q'}, {"ext_id", 'q'}, {"wait_on_stream", 'q'}, {"wait_on_event_corr", 'q'},
    {NULL, 0}};
static const ColSpec MEMORY_COLS[] = {
    {"ts_ns", 'q'}, {"name", 'i'}, {"pid", 'q'}, {"tid", 'q'}, {"bytes", 'd'},
    {"total_allocated", 'd'}, {"total_reserved", 'd'}, {"device_type", 'q'}, {"device_id", 'q'},
    {NULL, 0}};
static const ColSpec OVERHEAD_COLS[] = {{"ts_ns", 'q'}, {"dur_ns", 'q'}, {"name", 'i'}, {NULL, 0}};
static const ColSpec FLOWS_COLS[] = {
    {"ts_ns", 'q'}, {"is_start", '?'}, {"is_fwdbwd", '?'}, {"flow_id", 'q'}, {"pid", 'q'}, {"tid", 'q'},
    {NULL, 0}};
static const ColSpec COLLECTIVES_COLS[] = {
    {"ts_ns", 'q'}, {"dur_ns", 'q'}, {"on_gpu", '?'}, {"pid", 'q'}, {"tid", 'q'}, {"correlation", 'q'},
    {"ext_id", 'q'}, {"collective", 'S'}, {"in_nelems", 'd'}, {"out_nelems", 'd'}, {"dtype", 'S'},
    {"group_size", 'q'}, {"pg_name", 'S'}, {"pg_ranks", 'S'}, {"seq", 'q'}, {NULL, 0}};

static const ColSpec *FAMILY_COLS[F_COUNT] = {HOST_COLS, FRAMES_COLS, RUNTIME_COLS, GPU_COLS,
                                              GPU_ANN_COLS, SYNCS_COLS, MEMORY_COLS, OVERHEAD_COLS,
                                              FLOWS_COLS, COLLECTIVES_COLS};
#define MAX_COLS 24

/* categories (columns.FAMILY and CATEGORY_ALIASES) */
typedef struct {
    const char *cat;
    int family;
    int flag; /* host: is_annotation; runtime: is_driver; gpu: kind */
} CatSpec;

static const CatSpec CATS[] = {
    {"cpu_op", F_HOST, 0}, {"Operator", F_HOST, 0}, {"user_annotation", F_HOST, 1}, {"User", F_HOST, 1},
    {"python_function", F_FRAMES, 0},
    {"cuda_runtime", F_RUNTIME, 0}, {"Runtime", F_RUNTIME, 0}, {"cuda_driver", F_RUNTIME, 1},
    {"xpu_runtime", F_RUNTIME, 0}, {"xpu_driver", F_RUNTIME, 1}, {"privateuse1_runtime", F_RUNTIME, 0},
    {"privateuse1_driver", F_RUNTIME, 1}, {"mtia_runtime", F_RUNTIME, 0},
    {"kernel", F_GPU, 0}, {"Kernel", F_GPU, 0}, {"gpu_memcpy", F_GPU, 1}, {"Memcpy", F_GPU, 1},
    {"gpu_memset", F_GPU, 2}, {"Memset", F_GPU, 2},
    {"gpu_user_annotation", F_GPU_ANN, 0}, {"gpu_user_Annotation", F_GPU_ANN, 0},
    {"cuda_sync", F_SYNCS, 0}, {"cpu_instant_event", F_MEMORY, 0}, {"overhead", F_OVERHEAD, 0},
    {"ac2g", F_LAUNCH_FLOWS, 0}, {"async", F_LAUNCH_FLOWS, 0}, {"async_gpu", F_LAUNCH_FLOWS, 0},
    {"async_cpu_to_gpu", F_LAUNCH_FLOWS, 0},
    {"fwdbwd", F_FLOWS, 1}, {"forward_backward", F_FLOWS, 1},
    {NULL, 0, 0}};

/* ---------------------------------------------------------------------------------------------- */
/* name interning: raw string bodies -> codes, in order of first appearance                         */

typedef struct {
    uint64_t hash;
    uint32_t off; /* into the arena; UINT32_MAX for the null name */
    uint32_t len;
    int32_t code; /* -1: empty slot */
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;
    size_t count;
    Buf arena;   /* the bytes of every unique name */
    Buf entries; /* uint32 off, uint32 len per code, in code order */
} Interner;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static int interner_grow(Interner *it) {
    size_t cap = it->slots ? (it->mask + 1) * 2 : 1024;
    Slot *slots = (Slot *)malloc(cap * sizeof(Slot));
    if (!slots) return -1;
    for (size_t i = 0; i < cap; i++) slots[i].code = -1;
    if (it->slots) {
        for (size_t i = 0; i <= it->mask; i++) {
            if (it->slots[i].code < 0) continue;
            size_t j = it->slots[i].hash & (cap - 1);
            while (slots[j].code >= 0) j = (j + 1) & (cap - 1);
            slots[j] = it->slots[i];
        }
        free(it->slots);
    }
    it->slots = slots;
    it->mask = cap - 1;
    return 0;
}

/* The code of a name; s == NULL is the null (missing) name. -1 on memory failure. */
static int32_t intern(Interner *it, const char *s, size_t n) {
    if (!it->slots || (it->count + 1) * 2 > it->mask + 1) {
        if (interner_grow(it)) return -1;
    }
    uint64_t h = s ? hash_bytes(s, n) : 0x9E3779B97F4A7C15ULL;
    size_t j = h & it->mask;
    while (it->slots[j].code >= 0) {
        Slot *sl = &it->slots[j];
        if (sl->hash == h) {
            if (!s) {
                if (sl->off == UINT32_MAX) return sl->code;
            } else if (sl->off != UINT32_MAX && sl->len == n && memcmp(it->arena.data + sl->off, s, n) == 0) {
                return sl->code;
            }
        }
        j = (j + 1) & it->mask;
    }
    if (it->arena.len + n > UINT32_MAX - 1) return -1;
    uint32_t off = s ? (uint32_t)it->arena.len : UINT32_MAX;
    if (s && buf_put(&it->arena, s, n)) return -1;
    uint32_t pair[2] = {off, (uint32_t)n};
    if (buf_put(&it->entries, pair, sizeof pair)) return -1;
    Slot *sl = &it->slots[j];
    sl->hash = h;
    sl->off = off;
    sl->len = (uint32_t)n;
    sl->code = (int32_t)it->count++;
    return sl->code;
}

static void interner_free(Interner *it) {
    free(it->slots);
    it->slots = NULL;
    buf_free(&it->arena);
    buf_free(&it->entries);
    it->count = 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* the decoder object                                                                               */

typedef struct {
    int seen;
    size_t rows;
    Buf cols[MAX_COLS];
} Family;

typedef struct {
    PyObject_HEAD
    Family fam[F_COUNT];
    Interner names[F_COUNT];
    Buf raw;     /* bytes of raw values and strings kept for object columns */
    Buf punted;  /* JSON text of events left to the Python path */
    Buf punted_ends;
    int order[F_COUNT]; /* families in order of first appearance */
    int n_order;
    long long events;
    int busy;
    int sep; /* where between events the last feed stopped: see decode_range */
} Decoder;

static PyObject *Unsupported;

/* parse state of one feed call */
typedef struct {
    const char *base; /* buffer start: offsets in messages are relative to it */
    const char *end;
    int err; /* 0, ERR_INCOMPLETE, ERR_BAD */
    const char *why;
    const char *at;
} Cur;

enum { ERR_INCOMPLETE = 1, ERR_BAD = 2, ERR_MEMORY = 3 };

#define FAIL(c, p, msg) ((c)->err = ERR_BAD, (c)->why = (msg), (c)->at = (p), (const char *)NULL)
#define INCOMPLETE(c, p) ((c)->err = ERR_INCOMPLETE, (c)->at = (p), (const char *)NULL)

static unsigned char STR_SPECIAL[256]; /* '"', '\\', < 0x20, >= 0x80 */
static int decimal_point_ok = 1;

static inline const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static const char *read_u4(Cur *c, const char *p, unsigned *out) {
    if (c->end - p < 4) return INCOMPLETE(c, p);
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return FAIL(c, p, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return p + 4;
}

/* One UTF-8 sequence starting at p (p[0] >= 0x80), validated as strictly as Python's decoder. */
static const char *utf8_seq(Cur *c, const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    size_t avail = (size_t)(c->end - p);
    unsigned char b0 = u[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return FAIL(c, p, "invalid UTF-8");
    }
    if (avail < n) return INCOMPLETE(c, p);
    if (u[1] < lo || u[1] > hi) return FAIL(c, p, "invalid UTF-8");
    for (size_t i = 2; i < n; i++)
        if (u[i] < 0x80 || u[i] > 0xBF) return FAIL(c, p, "invalid UTF-8");
    return p + n;
}

/* p after the opening quote; returns after the closing quote. *esc: the body has escapes. */
static const char *scan_string(Cur *c, const char *p, int *esc) {
    const char *end = c->end;
    for (;;) {
        while (p < end && !STR_SPECIAL[(unsigned char)*p]) p++;
        if (p >= end) return INCOMPLETE(c, p);
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') return p + 1;
        if (ch == '\\') {
            *esc = 1;
            if (p + 1 >= end) return INCOMPLETE(c, p);
            char e = p[1];
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
                continue;
            }
            if (e != 'u') return FAIL(c, p, "bad escape in string");
            unsigned cp;
            p = read_u4(c, p + 2, &cp);
            if (!p) return NULL;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return FAIL(c, p, "lone surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 2) return INCOMPLETE(c, p);
                if (p[0] != '\\' || p[1] != 'u') return FAIL(c, p, "lone surrogate");
                unsigned lo;
                p = read_u4(c, p + 2, &lo);
                if (!p) return NULL;
                if (lo < 0xDC00 || lo > 0xDFFF) return FAIL(c, p, "lone surrogate");
            }
            continue;
        }
        if (ch < 0x20) return FAIL(c, p, "control character in string");
        p = utf8_seq(c, p);
        if (!p) return NULL;
    }
}

/* A JSON number; *is_int: no fraction, no exponent. */
static const char *scan_number(Cur *c, const char *p, int *is_int) {
    const char *end = c->end;
    const char *q = p;
    *is_int = 1;
    if (q < end && *q == '-') q++;
    if (q >= end) return INCOMPLETE(c, p);
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (q < end && *q >= '0' && *q <= '9') q++;
    } else {
        return FAIL(c, q, "bad number");
    }
    if (q < end && *q == '.') {
        *is_int = 0;
        q++;
        if (q >= end) return INCOMPLETE(c, p);
        if (!(*q >= '0' && *q <= '9')) return FAIL(c, q, "bad number");
        while (q < end && *q >= '0' && *q <= '9') q++;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        *is_int = 0;
        q++;
        if (q < end && (*q == '+' || *q == '-')) q++;
        if (q >= end) return INCOMPLETE(c, p);
        if (!(*q >= '0' && *q <= '9')) return FAIL(c, q, "bad number");
        while (q < end && *q >= '0' && *q <= '9') q++;
    }
    if (q >= end) return INCOMPLETE(c, p); /* inside an event a number is always followed by more */
    return q;
}

static const char *skip_value(Cur *c, const char *p, int depth);

static const char *scan_literal(Cur *c, const char *p, const char *word, size_t n) {
    size_t avail = (size_t)(c->end - p);
    if (avail < n) {
        if (memcmp(p, word, avail) == 0) return INCOMPLETE(c, p);
        return FAIL(c, p, "bad literal");
    }
    if (memcmp(p, word, n) != 0) return FAIL(c, p, "bad literal");
    return p + n;
}

/* p at a value; fills v (if not NULL); returns after the value. */
static const char *scan_value(Cur *c, const char *p, Val *v, int depth) {
    if (p >= c->end) return INCOMPLETE(c, p);
    const char *start = p;
    int t;
    switch (*p) {
        case '"': {
            int esc = 0;
            p = scan_string(c, p + 1, &esc);
            if (!p) return NULL;
            if (v) {
                v->s = start + 1;
                v->n = (size_t)(p - start - 2);
                v->t = esc ? V_STRE : V_STR;
            }
            return p;
        }
        case '{':
        case '[':
            t = *p == '{' ? V_OBJ : V_ARR;
            p = skip_value(c, p, depth);
            break;
        case 't':
            t = V_TRUE;
            p = scan_literal(c, p, "true", 4);
            break;
        case 'f':
            t = V_FALSE;
            p = scan_literal(c, p, "false", 5);
            break;
        case 'n':
            t = V_NULL;
            p = scan_literal(c, p, "null", 4);
            break;
        default: {
            int is_int;
            p = scan_number(c, p, &is_int);
            t = is_int ? V_INT : V_NUM;
            break;
        }
    }
    if (!p) return NULL;
    if (v) {
        v->s = start;
        v->n = (size_t)(p - start);
        v->t = t;
    }
    return p;
}

static const char *skip_value(Cur *c, const char *p, int depth) {
    if (p >= c->end) return INCOMPLETE(c, p);
    if (*p != '{' && *p != '[') return scan_value(c, p, NULL, depth);
    if (depth >= MAX_DEPTH) return FAIL(c, p, "nested too deeply");
    int obj = *p == '{';
    p = skip_ws(p + 1, c->end);
    if (p >= c->end) return INCOMPLETE(c, p);
    if (*p == (obj ? '}' : ']')) return p + 1;
    for (;;) {
        if (obj) {
            if (*p != '"') return FAIL(c, p, "expected a key");
            int esc = 0;
            p = scan_string(c, p + 1, &esc);
            if (!p) return NULL;
            p = skip_ws(p, c->end);
            if (p >= c->end) return INCOMPLETE(c, p);
            if (*p != ':') return FAIL(c, p, "expected ':'");
            p = skip_ws(p + 1, c->end);
        }
        p = skip_value(c, p, depth + 1);
        if (!p) return NULL;
        p = skip_ws(p, c->end);
        if (p >= c->end) return INCOMPLETE(c, p);
        if (*p == ',') {
            p = skip_ws(p + 1, c->end);
            if (p >= c->end) return INCOMPLETE(c, p);
            continue;
        }
        if (*p == (obj ? '}' : ']')) return p + 1;
        return FAIL(c, p, "expected ',' or a closing bracket");
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* numbers                                                                                          */

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A validated JSON number token to the correctly rounded double. 0, or -1 when out of range
 * (msgspec refuses those: the caller raises Unsupported). */
static int number_to_double(const char *s, size_t n, double *out) {
    const char *p = s, *e = s + n;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    uint64_t m = 0;
    int digits = 0, exp10 = 0;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (digits < 19) {
            m = m * 10 + (uint64_t)(*p - '0');
            if (m) digits++;
        } else {
            exp10++;
        }
    }
    if (p < e && *p == '.') {
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
            if (digits < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                if (m) digits++;
                exp10--;
            }
        }
    }
    int ex = 0;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (*p == '+' || *p == '-') eneg = *p++ == '-';
        for (; p < e && *p >= '0' && *p <= '9'; p++)
            if (ex < 100000) ex = ex * 10 + (*p - '0');
        if (eneg) ex = -ex;
    }
    int total = exp10 + ex;
    if (digits < 19 && m < (1ULL << 53) && total >= -22 && total <= 22) {
        /* Clinger's fast path: both operands exact, one rounding. */
        double d = (double)m;
        d = total < 0 ? d / POW10[-total] : d * POW10[total];
        *out = neg ? -d : d;
        return 0;
    }
    if (!decimal_point_ok) return -1;
    char tmp[512];
    if (n >= sizeof tmp) return -1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    double d = strtod(tmp, NULL);
    if (isinf(d)) return -1;
    *out = d;
    return 0;
}

/* The Python path's _us_to_ns for a double. */
static int64_t us_double_to_ns(double us) {
    double whole = floor(us);
    if (!isfinite(whole) || fabs(whole) > ABSURD_US) return MISSING_TIME;
    double frac = rint((us - whole) * 1000.0);
    return (int64_t)whole * 1000 + (int64_t)frac;
}

/* A string that is a number for Python's float()/int(x, 16): 0 and *out, or -1 (not a number),
 * or -2 (a form whose reading differs between numpy and Python: the caller gives up). */
static int numeric_string(const char *s, size_t n, double *out, int *is_hex, int64_t *hexv) {
    const char *p = s, *e = s + n;
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) e--;
    *is_hex = 0;
    for (const char *q = p; q < e; q++)
        if (*q == '_' || *q == '(' || (unsigned char)*q >= 0x80) return -2;
    if (p >= e) return -1;
    const char *h = p;
    int neg = 0;
    if (*h == '-' || *h == '+') neg = *h++ == '-';
    if (e - h > 2 && h[0] == '0' && (h[1] == 'x' || h[1] == 'X')) {
        uint64_t v = 0;
        for (h += 2; h < e; h++) {
            int d = hexval(*h);
            if (d < 0) return -1;
            if (v > (UINT64_MAX >> 4)) return -2;
            v = v * 16 + (uint64_t)d;
        }
        if (v > (uint64_t)INT64_MAX) return -2;
        *is_hex = 1;
        *hexv = neg ? -(int64_t)v : (int64_t)v;
        *out = (double)*hexv;
        return 0;
    }
    if (!decimal_point_ok) return -2;
    char tmp[128];
    size_t len = (size_t)(e - p);
    if (len >= sizeof tmp) return -2;
    memcpy(tmp, p, len);
    tmp[len] = 0;
    /* strtod reads hex floats ("0x1p3") and "infinity"/"nan" like Python; hex handled above */
    char *stop;
    double d = strtod(tmp, &stop);
    if (stop != tmp + len || stop == tmp) return -1;
    *out = d;
    return 0;
}

/* Val -> exact nanoseconds (ts/dur). 0 ok, -1 unsupported. missing_as: the value for null/absent. */
static int val_ns(const Val *v, int64_t missing_as, int64_t *out) {
    switch (v->t) {
        case V_NONE:
        case V_NULL:
            *out = missing_as;
            return 0;
        case V_INT:
        case V_NUM: {
            const char *p = v->s, *e = v->s + v->n;
            int neg = *p == '-';
            if (neg) p++;
            const char *q = p;
            uint64_t whole = 0;
            int nd = 0;
            while (q < e && *q >= '0' && *q <= '9') {
                whole = whole * 10 + (uint64_t)(*q++ - '0');
                if (++nd > 16) break;
            }
            if (nd <= 16 && (double)whole <= ABSURD_US) {
                if (q == e) {
                    *out = neg ? -(int64_t)whole * 1000 : (int64_t)whole * 1000;
                    return 0;
                }
                if (*q == '.') {
                    const char *f = q + 1;
                    size_t nf = (size_t)(e - f);
                    int plain = nf >= 1 && nf <= 3;
                    for (size_t i = 0; plain && i < nf; i++) plain = f[i] >= '0' && f[i] <= '9';
                    if (plain) {
                        int64_t frac = 0;
                        for (size_t i = 0; i < 3; i++) frac = frac * 10 + (i < nf ? f[i] - '0' : 0);
                        int64_t ns = (int64_t)whole * 1000 + frac;
                        if (neg) {
                            /* floor(-x) must stay within the bound too, as in _us_to_ns */
                            if (frac && (double)(whole + 1) > ABSURD_US) {
                                *out = MISSING_TIME;
                                return 0;
                            }
                            ns = -ns;
                        }
                        *out = ns;
                        return 0;
                    }
                }
            }
            double d;
            if (number_to_double(v->s, v->n, &d)) return -1;
            *out = us_double_to_ns(d);
            return 0;
        }
        case V_STR: {
            double d;
            int is_hex;
            int64_t hv;
            int r = numeric_string(v->s, v->n, &d, &is_hex, &hv);
            if (r == -2) return -1;
            *out = r < 0 ? MISSING_TIME : us_double_to_ns(d);
            return 0;
        }
        default:
            return -1;
    }
}

/* A double as an id, as columns._int reads a float: truncated, -1 when not finite or too large. */
static int64_t id_from_double(double d) { return (isfinite(d) && fabs(d) < 9.0e18) ? (int64_t)d : -1; }

/* Val -> int64 id as columns.ints does; -1 for missing or unreadable. 0 ok, -1 unsupported. */
static int val_i64(const Val *v, int64_t *out) {
    switch (v->t) {
        case V_NONE:
        case V_NULL:
            *out = -1;
            return 0;
        case V_INT: {
            const char *p = v->s, *e = v->s + v->n;
            int neg = *p == '-';
            if (neg) p++;
            if (e - p > 19) {
                /* beyond int64: numpy overflows, columns._int gives -1 */
                *out = -1;
                return 0;
            }
            uint64_t x = 0;
            for (; p < e; p++) x = x * 10 + (uint64_t)(*p - '0');
            if (neg ? x > (uint64_t)INT64_MAX + 1 : x > (uint64_t)INT64_MAX) {
                *out = -1;
                return 0;
            }
            *out = neg ? (int64_t)(0 - x) : (int64_t)x;
            return 0;
        }
        case V_NUM: {
            double d;
            if (number_to_double(v->s, v->n, &d)) return -1;
            *out = id_from_double(d);
            return 0;
        }
        case V_STR: {
            double d;
            int is_hex;
            int64_t hv;
            int r = numeric_string(v->s, v->n, &d, &is_hex, &hv);
            if (r == -2) return -1;
            *out = r < 0 ? -1 : is_hex ? hv : id_from_double(d);
            return 0;
        }
        default:
            return -1;
    }
}

/* Val -> float64 as columns.floats does; NaN for missing or unreadable. */
static int val_f64(const Val *v, double *out) {
    switch (v->t) {
        case V_NONE:
        case V_NULL:
            *out = NAN;
            return 0;
        case V_INT:
        case V_NUM:
            return number_to_double(v->s, v->n, out);
        case V_STR: {
            int is_hex;
            int64_t hv;
            int r = numeric_string(v->s, v->n, out, &is_hex, &hv);
            if (r == -2) return -1;
            if (r < 0) *out = NAN;
            return 0;
        }
        default:
            return -1;
    }
}

/* grid/block [x, y, z]; anything but a 3-list of numbers is (0, 0, 0) as in columns._xyz. */
static int val_xyz(const Val *v, int64_t xyz[3]) {
    xyz[0] = xyz[1] = xyz[2] = 0;
    if (v->t != V_ARR) {
        if (v->t == V_TRUE || v->t == V_FALSE) return -1;
        return 0;
    }
    Cur c = {v->s, v->s + v->n, 0, NULL, NULL};
    const char *p = skip_ws(v->s + 1, c.end);
    Val items[3];
    int k = 0;
    if (*p == ']') return 0;
    for (;;) {
        Val it;
        p = scan_value(&c, p, &it, 1);
        if (!p) return -1;
        if (it.t != V_INT && it.t != V_NUM && it.t != V_STR && it.t != V_NULL) return -1;
        if (k < 3) items[k] = it;
        k++;
        p = skip_ws(p, c.end);
        if (*p == ',') {
            p = skip_ws(p + 1, c.end);
            continue;
        }
        break;
    }
    if (k != 3) return 0;
    for (int i = 0; i < 3; i++)
        if (val_i64(&items[i], &xyz[i])) return -1;
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* the types schema.py allows for each key                                                          */

/* T_ID: schema.Id, T_NUMBER: schema.Number, T_TEXT, T_FLAG, T_DIM3; T_ANY: msgspec.Raw, or args */
enum { T_ANY, T_TEXT, T_ID, T_NUMBER, T_FLAG, T_DIM3 };

static const unsigned char EVENT_TYPES[E_COUNT] = {T_TEXT, T_TEXT, T_TEXT, T_ID,  T_ID,
                                                   T_NUMBER, T_NUMBER, T_ID, T_ANY};
static const unsigned char ARG_TYPES[A_COUNT] = {
    T_ID, T_ID, T_ID, T_ID, T_ID, T_ID, T_ID,                           /* External id .. cid */
    T_DIM3, T_DIM3, T_NUMBER, T_NUMBER, T_NUMBER, T_NUMBER, T_NUMBER,   /* grid .. occupancy */
    T_ID, T_NUMBER, T_NUMBER, T_ANY, T_ANY, T_ANY, T_ID, T_ID,          /* graph id .. Fwd thread id */
    T_ID, T_FLAG, T_ID, T_ID, T_ID, T_ID, T_ID,                         /* Record function id .. wait event */
    T_NUMBER, T_NUMBER, T_NUMBER, T_ID, T_ID, T_TEXT, T_NUMBER,         /* Bytes .. In msg nelems */
    T_NUMBER, T_ID, T_TEXT, T_TEXT, T_TEXT, T_TEXT, T_ID};              /* Out msg nelems .. Seq */

/* schema.Id: an integer within int64, a float in (-9e18, 9e18), a string, null or absent */
static int id_ok(const Val *v) {
    switch (v->t) {
        case V_INT: {
            const char *p = v->s, *e = v->s + v->n;
            int neg = *p == '-';
            if (neg) p++;
            if (e - p != 19) return e - p < 19;
            uint64_t x = 0;
            for (; p < e; p++) x = x * 10 + (uint64_t)(*p - '0');
            return neg ? x <= (uint64_t)INT64_MAX + 1 : x <= (uint64_t)INT64_MAX;
        }
        case V_NUM: {
            double d;
            return number_to_double(v->s, v->n, &d) == 0 && d > -9.0e18 && d < 9.0e18;
        }
        default:
            return v->t == V_NONE || v->t == V_NULL || v->t == V_STR || v->t == V_STRE;
    }
}

/* schema.Dim3: [x, y, z] of ids, a string, null or absent */
static int dim3_ok(const Val *v) {
    if (v->t != V_ARR) return v->t == V_NONE || v->t == V_NULL || v->t == V_STR || v->t == V_STRE;
    Cur c = {v->s, v->s + v->n, 0, NULL, NULL};
    const char *p = skip_ws(v->s + 1, c.end);
    int k = 0;
    if (*p == ']') return 0;
    for (;;) {
        Val it;
        p = scan_value(&c, p, &it, 1);
        if (!p || !id_ok(&it) || ++k > 3) return 0;
        p = skip_ws(p, c.end);
        if (*p != ',') break;
        p = skip_ws(p + 1, c.end);
    }
    return k == 3;
}

/* Whether v has a type schema.py allows for its key; else the Python path reads the file and
 * drops the value with a warning. Checked as each value is scanned, repeated keys included
 * (msgspec checks every occurrence too). */
static int types_ok(int type, const Val *v) {
    int t = v->t;
    switch (type) {
        case T_TEXT:
            return t == V_NONE || t == V_NULL || t == V_STR || t == V_STRE;
        case T_ID:
            return id_ok(v);
        case T_NUMBER:
            return t == V_NONE || t == V_NULL || t == V_STR || t == V_STRE || t == V_INT || t == V_NUM;
        case T_FLAG:
            return t == V_NONE || t == V_NULL || t == V_TRUE || t == V_FALSE;
        case T_DIM3:
            return dim3_ok(v);
        default:
            return 1;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* building rows                                                                                    */

#define COL(f, i) (&self->fam[f].cols[i])

static int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, sizeof v); }
static int put_f64(Buf *b, double v) { return buf_put(b, &v, sizeof v); }
static int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, sizeof v); }
static int put_u8(Buf *b, uint8_t v) { return buf_put(b, &v, sizeof v); }

/* raw/strings columns: (int64 offset into self->raw, int64 length); offset -1 = None */
static int put_raw(Decoder *self, Buf *col, const char *s, size_t n) {
    int64_t pair[2] = {(int64_t)self->raw.len, (int64_t)n};
    if (buf_put(&self->raw, s, n)) return -1;
    return buf_put(col, pair, sizeof pair);
}
static int put_none(Buf *col) {
    int64_t pair[2] = {-1, 0};
    return buf_put(col, pair, sizeof pair);
}

/* msgspec.Raw semantics: absent -> None; present (even null) -> its exact bytes */
static int put_rawval(Decoder *self, Buf *col, const Val *v) {
    if (v->t == V_NONE) return put_none(col);
    if (v->t == V_STR || v->t == V_STRE) return put_raw(self, col, v->s - 1, v->n + 2);
    return put_raw(self, col, v->s, v->n);
}

/* str(value) for strings; None for null/absent; other kinds are left to the Python path */
static int put_strval(Decoder *self, Buf *col, const Val *v, int *unsupported) {
    if (v->t == V_NONE || v->t == V_NULL) return put_none(col);
    if (v->t == V_STR || v->t == V_STRE) {
        /* mark escaped bodies with a negative length - 1 so Python decodes them as JSON */
        int64_t pair[2] = {(int64_t)self->raw.len, v->t == V_STRE ? -(int64_t)v->n - 1 : (int64_t)v->n};
        if (buf_put(&self->raw, v->s, v->n)) return -1;
        return buf_put(col, pair, sizeof pair);
    }
    *unsupported = 1;
    return 0;
}

static int first_of(const Val *a, const Val *b, const Val **out) {
    *out = (a->t == V_NONE || a->t == V_NULL) ? b : a;
    return 0;
}

static void mark_seen(Decoder *self, int f) {
    if (!self->fam[f].seen) {
        self->fam[f].seen = 1;
        self->order[self->n_order++] = f;
    }
}

typedef struct {
    Val ev[E_COUNT];
    Val arg[A_COUNT];
} Event;

#define TRY(x) \
    do { if ((x)) return -1; } while (0)
#define NUM(x) \
    do { if ((x)) return -2; } while (0)

/* Times of a row as read: ts (missing -> MISSING_TIME), dur (missing -> 0). */
static int row_times(const Event *e, int64_t *ts, int64_t *dur, int with_dur) {
    NUM(val_ns(&e->ev[E_TS], MISSING_TIME, ts));
    if (with_dur) NUM(val_ns(&e->ev[E_DUR], 0, dur));
    return 0;
}

/*
 * Row builders: 0 ok, -1 out of memory, -2 a value the Python path must read (the caller then
 * refuses the whole file, so a row left half-appended is never used).
 */

/* str(value) columns take strings or null only */
static int strings_ok(const Val *const *vals, int n) {
    for (int i = 0; i < n; i++) {
        int t = vals[i]->t;
        if (t != V_NONE && t != V_NULL && t != V_STR && t != V_STRE) return 0;
    }
    return 1;
}

static int add_collective(Decoder *self, const Event *e, int64_t ts, int64_t dur, int on_gpu) {
    const Val *a = e->arg;
    int64_t pid, tid, corr, ext, gsize, seq;
    double in_n, out_n;
    const Val *extv, *pgv;
    first_of(&a[A_EXT_ID], &a[A_EXT_ID_LOWER], &extv);
    first_of(&a[A_PG_NAME], &a[A_PG_NAME_OLD], &pgv);
    const Val *strs[4] = {&a[A_COLL_NAME], &a[A_DTYPE], pgv, &a[A_PG_RANKS]};
    NUM(val_i64(&e->ev[E_PID], &pid) || val_i64(&e->ev[E_TID], &tid) || val_i64(&a[A_CORRELATION], &corr) ||
        val_i64(extv, &ext) || val_f64(&a[A_IN_NELEMS], &in_n) || val_f64(&a[A_OUT_NELEMS], &out_n) ||
        val_i64(&a[A_GROUP_SIZE], &gsize) || val_i64(&a[A_SEQ], &seq) || !strings_ok(strs, 4));
    int f = F_COLLECTIVES, un = 0;
    mark_seen(self, f);
    TRY(put_i64(COL(f, 0), ts));
    TRY(put_i64(COL(f, 1), dur));
    TRY(put_u8(COL(f, 2), (uint8_t)on_gpu));
    TRY(put_i64(COL(f, 3), pid));
    TRY(put_i64(COL(f, 4), tid));
    TRY(put_i64(COL(f, 5), corr));
    TRY(put_i64(COL(f, 6), ext));
    TRY(put_strval(self, COL(f, 7), strs[0], &un));
    TRY(put_f64(COL(f, 8), in_n));
    TRY(put_f64(COL(f, 9), out_n));
    TRY(put_strval(self, COL(f, 10), strs[1], &un));
    TRY(put_i64(COL(f, 11), gsize));
    TRY(put_strval(self, COL(f, 12), strs[2], &un));
    TRY(put_strval(self, COL(f, 13), strs[3], &un));
    TRY(put_i64(COL(f, 14), seq));
    self->fam[f].rows++;
    return 0;
}

/* A collective's metadata rides on a host op or a kernel (format doc section 4.9) */
static int maybe_collective(Decoder *self, const Event *e, int64_t ts, int64_t dur, int on_gpu) {
    int t = e->arg[A_COLL_NAME].t;
    return (t == V_NONE || t == V_NULL) ? 0 : add_collective(self, e, ts, dur, on_gpu);
}

static int32_t name_code(Decoder *self, int f, const Val *v, int *unsupported) {
    if (v->t == V_NONE || v->t == V_NULL) return intern(&self->names[f], NULL, 0);
    if (v->t == V_STR || v->t == V_STRE) {
        /* escaped bodies are interned raw; Python decodes them and merges equal names */
        return intern(&self->names[f], v->s, v->n);
    }
    *unsupported = 1;
    return 0;
}

/* The columns every named family starts with: ts_ns, dur_ns, name. */
static int row_start(Decoder *self, const Event *e, int f, int64_t *ts, int64_t *dur) {
    int un = 0;
    NUM(row_times(e, ts, dur, 1));
    int32_t code = name_code(self, f, &e->ev[E_NAME], &un);
    if (un) return -2;
    if (code < 0) return -1;
    mark_seen(self, f);
    TRY(put_i64(COL(f, 0), *ts));
    TRY(put_i64(COL(f, 1), *dur));
    TRY(put_i32(COL(f, 2), code));
    return 0;
}

#define START(f)                                       \
    do {                                               \
        int _r = row_start(self, e, (f), &ts, &dur);  \
        if (_r) return _r;                             \
    } while (0)

/* Append one event of a tabled family (columns.py's builder of the same family). */
static int add_event(Decoder *self, const Event *e, int f, int flag) {
    const Val *a = e->arg;
    const Val *ev = e->ev;
    int64_t ts = 0, dur = 0;

    switch (f) {
        case F_HOST: {
            int64_t pid, tid, ext, seq, fwd, rf;
            const Val *extv;
            first_of(&a[A_EXT_ID], &a[A_EXT_ID_LOWER], &extv);
            NUM(val_i64(&ev[E_PID], &pid) || val_i64(&ev[E_TID], &tid) || val_i64(extv, &ext) ||
                val_i64(&a[A_SEQ_NR], &seq) || val_i64(&a[A_FWD_TID], &fwd) || val_i64(&a[A_RF_ID], &rf));
            START(f);
            TRY(put_u8(COL(f, 3), (uint8_t)flag));
            TRY(put_i64(COL(f, 4), pid));
            TRY(put_i64(COL(f, 5), tid));
            TRY(put_i64(COL(f, 6), ext));
            TRY(put_i64(COL(f, 7), seq));
            TRY(put_i64(COL(f, 8), fwd));
            TRY(put_i64(COL(f, 9), rf));
            TRY(put_u8(COL(f, 10), (uint8_t)(a[A_FINISHED].t == V_FALSE)));
            TRY(put_rawval(self, COL(f, 11), &a[A_INPUT_DIMS]));
            TRY(put_rawval(self, COL(f, 12), &a[A_INPUT_TYPE]));
            TRY(put_rawval(self, COL(f, 13), &a[A_CONCRETE]));
            self->fam[f].rows++;
            return maybe_collective(self, e, ts, dur, 0);
        }
        case F_FRAMES: {
            int64_t pid, tid, pyid, pyparent, mod;
            NUM(val_i64(&ev[E_PID], &pid) || val_i64(&ev[E_TID], &tid) || val_i64(&a[A_PY_ID], &pyid) ||
                val_i64(&a[A_PY_PARENT], &pyparent) || val_i64(&a[A_PY_MODULE], &mod));
            START(f);
            TRY(put_i64(COL(f, 3), pid));
            TRY(put_i64(COL(f, 4), tid));
            TRY(put_i64(COL(f, 5), pyid));
            TRY(put_i64(COL(f, 6), pyparent));
            TRY(put_i64(COL(f, 7), mod));
            self->fam[f].rows++;
            return 0;
        }
        case F_RUNTIME: {
            int64_t pid, tid, corr, ext, cbid, stream;
            const Val *extv, *cbv;
            first_of(&a[A_EXT_ID], &a[A_EXT_ID_LOWER], &extv);
            first_of(&a[A_CBID], &a[A_CID], &cbv);
            NUM(val_i64(&ev[E_PID], &pid) || val_i64(&ev[E_TID], &tid) || val_i64(&a[A_CORRELATION], &corr) ||
                val_i64(extv, &ext) || val_i64(cbv, &cbid) || val_i64(&a[A_STREAM], &stream));
            START(f);
            TRY(put_u8(COL(f, 3), (uint8_t)flag));
            TRY(put_i64(COL(f, 4), pid));
            TRY(put_i64(COL(f, 5), tid));
            TRY(put_i64(COL(f, 6), corr));
            TRY(put_i64(COL(f, 7), ext));
            TRY(put_i64(COL(f, 8), cbid));
            TRY(put_i64(COL(f, 9), stream));
            self->fam[f].rows++;
            return 0;
        }
        case F_GPU: {
            int64_t dev, pid, stream, tid, corr, ext, gid, grid[3], block[3];
            double regs, smem, bps, wps, occ, bytes;
            const Val *extv, *bytesv;
            first_of(&a[A_EXT_ID], &a[A_EXT_ID_LOWER], &extv);
            first_of(&a[A_BYTES], &a[A_SIZE], &bytesv);
            NUM(val_i64(&a[A_DEVICE], &dev) || val_i64(&ev[E_PID], &pid) || val_i64(&a[A_STREAM], &stream) ||
                val_i64(&ev[E_TID], &tid) || val_i64(&a[A_CORRELATION], &corr) || val_i64(extv, &ext) ||
                val_xyz(&a[A_GRID], grid) || val_xyz(&a[A_BLOCK], block) || val_f64(&a[A_REGISTERS], &regs) ||
                val_f64(&a[A_SHARED_MEM], &smem) || val_f64(&a[A_BLOCKS_PER_SM], &bps) ||
                val_f64(&a[A_WARPS_PER_SM], &wps) || val_f64(&a[A_OCCUPANCY], &occ) ||
                val_i64(&a[A_GRAPH_ID], &gid) || val_f64(bytesv, &bytes));
            START(f);
            TRY(put_u8(COL(f, 3), (uint8_t)flag));
            TRY(put_i64(COL(f, 4), dev >= 0 ? dev : pid));
            TRY(put_i64(COL(f, 5), stream >= 0 ? stream : tid));
            TRY(put_i64(COL(f, 6), corr));
            TRY(put_i64(COL(f, 7), ext));
            for (int i = 0; i < 3; i++) TRY(put_i64(COL(f, 8 + i), grid[i]));
            for (int i = 0; i < 3; i++) TRY(put_i64(COL(f, 11 + i), block[i]));
            TRY(put_f64(COL(f, 14), regs));
            TRY(put_f64(COL(f, 15), smem));
            TRY(put_f64(COL(f, 16), bps));
            TRY(put_f64(COL(f, 17), wps));
            TRY(put_f64(COL(f, 18), occ));
            TRY(put_i64(COL(f, 19), gid));
            TRY(put_f64(COL(f, 20), bytes));
            self->fam[f].rows++;
            return maybe_collective(self, e, ts, dur, 1);
        }
        case F_GPU_ANN: {
            int64_t pid, tid, ext;
            NUM(val_i64(&ev[E_PID], &pid) || val_i64(&ev[E_TID], &tid) || val_i64(&a[A_EXT_ID], &ext));
            START(f);
            TRY(put_i64(COL(f, 3), pid));
            TRY(put_i64(COL(f, 4), tid));
            TRY(put_i64(COL(f, 5), ext));
            self->fam[f].rows++;
            return 0;
        }
        case F_SYNCS: {
            int64_t pid, dev, stream, corr, ext, wstream, wevent;
            NUM(val_i64(&ev[E_PID], &pid) || val_i64(&a[A_DEVICE], &dev) || val_i64(&a[A_STREAM], &stream) ||
                val_i64(&a[A_CORRELATION], &corr) || val_i64(&a[A_EXT_ID], &ext) ||
                val_i64(&a[A_WAIT_STREAM], &wstream) || val_i64(&a[A_WAIT_EVENT], &wevent));
            START(f);
            TRY(put_i64(COL(f, 3), dev >= 0 ? dev : pid));
            TRY(put_i64(COL(f, 4), stream));
            TRY(put_i64(COL(f, 5), corr));
            TRY(put_i64(COL(f, 6), ext));
            TRY(put_i64(COL(f, 7), wstream));
            TRY(put_i64(COL(f, 8), wevent));
            self->fam[f].rows++;
            return 0;
        }
        case F_OVERHEAD:
            START(f);
            self->fam[f].rows++;
            return 0;
        case F_MEMORY: {
            mark_seen(self, f); /* the Python path makes the table even when no row passes the filter */
            const Val *nm = &ev[E_NAME];
            if (nm->t == V_NONE || nm->t == V_NULL) return 0;
            if (nm->t != V_STR) return -2;
            if (!((nm->n == 8 && memcmp(nm->s, "[memory]", 8) == 0) ||
                  (nm->n == 13 && memcmp(nm->s, "[OutOfMemory]", 13) == 0)))
                return 0;
            int64_t pid, tid, dtype, did;
            double bytes, alloc, reserved;
            int un = 0;
            NUM(row_times(e, &ts, &dur, 0) || val_i64(&ev[E_PID], &pid) || val_i64(&ev[E_TID], &tid) ||
                val_f64(&a[A_MEM_BYTES], &bytes) || val_f64(&a[A_TOTAL_ALLOC], &alloc) ||
                val_f64(&a[A_TOTAL_RESERVED], &reserved) || val_i64(&a[A_DEVICE_TYPE], &dtype) ||
                val_i64(&a[A_DEVICE_ID], &did));
            int32_t code = name_code(self, f, nm, &un);
            if (code < 0) return -1;
            TRY(put_i64(COL(f, 0), ts));
            TRY(put_i32(COL(f, 1), code));
            TRY(put_i64(COL(f, 2), pid));
            TRY(put_i64(COL(f, 3), tid));
            TRY(put_f64(COL(f, 4), bytes));
            TRY(put_f64(COL(f, 5), alloc));
            TRY(put_f64(COL(f, 6), reserved));
            TRY(put_i64(COL(f, 7), dtype));
            TRY(put_i64(COL(f, 8), did));
            self->fam[f].rows++;
            return 0;
        }
        case F_FLOWS: {
            int64_t id, pid, tid;
            const Val *ph = &ev[E_PH];
            if (ph->t == V_STRE || (ph->t != V_STR && ph->t != V_NONE && ph->t != V_NULL)) return -2;
            NUM(row_times(e, &ts, &dur, 0) || val_i64(&ev[E_ID], &id) || val_i64(&ev[E_PID], &pid) ||
                val_i64(&ev[E_TID], &tid));
            mark_seen(self, f);
            TRY(put_i64(COL(f, 0), ts));
            TRY(put_u8(COL(f, 1), (uint8_t)(ph->t == V_STR && ph->n == 1 && ph->s[0] == 's')));
            TRY(put_u8(COL(f, 2), (uint8_t)flag));
            TRY(put_i64(COL(f, 3), id));
            TRY(put_i64(COL(f, 4), pid));
            TRY(put_i64(COL(f, 5), tid));
            self->fam[f].rows++;
            return 0;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* the event scanner                                                                                */

static int match_key(const char *s, size_t n, const char *const *keys, const size_t *lens, int count) {
    for (int i = 0; i < count; i++)
        if (lens[i] == n && memcmp(keys[i], s, n) == 0) return i;
    return -1;
}

static size_t EVENT_LENS[E_COUNT];

/* p at '{'. Returns after '}'. */
static const char *scan_event(Cur *c, const char *p, Event *e) {
    const char *end = c->end;
    for (int i = 0; i < E_COUNT; i++) e->ev[i].t = V_NONE;
    for (int i = 0; i < A_COUNT; i++) e->arg[i].t = V_NONE;
    p = skip_ws(p + 1, end);
    if (p >= end) return INCOMPLETE(c, p);
    if (*p == '}') return p + 1;
    for (;;) {
        if (*p != '"') return FAIL(c, p, "expected a key");
        const char *ks = p + 1;
        int esc = 0;
        p = scan_string(c, ks, &esc);
        if (!p) return NULL;
        size_t kn = (size_t)(p - ks - 1);
        if (esc) return FAIL(c, ks, "escaped key");
        p = skip_ws(p, end);
        if (p >= end) return INCOMPLETE(c, p);
        if (*p != ':') return FAIL(c, p, "expected ':'");
        p = skip_ws(p + 1, end);
        int k = match_key(ks, kn, EVENT_KEYS, EVENT_LENS, E_COUNT);
        if (k == E_ARGS) {
            if (p >= end) return INCOMPLETE(c, p);
            if (*p == '{') {
                for (int i = 0; i < A_COUNT; i++) e->arg[i].t = V_NONE; /* a repeated key: the last wins */
                e->ev[E_ARGS].t = V_OBJ;
                p = skip_ws(p + 1, end);
                if (p >= end) return INCOMPLETE(c, p);
                if (*p == '}') {
                    p++;
                } else {
                    for (;;) {
                        if (*p != '"') return FAIL(c, p, "expected a key");
                        const char *as = p + 1;
                        int aesc = 0;
                        p = scan_string(c, as, &aesc);
                        if (!p) return NULL;
                        size_t an = (size_t)(p - as - 1);
                        p = skip_ws(p, end);
                        if (p >= end) return INCOMPLETE(c, p);
                        if (*p != ':') return FAIL(c, p, "expected ':'");
                        p = skip_ws(p + 1, end);
                        int ak = aesc ? -2 : match_key(as, an, ARG_KEYS, ARG_LENS, A_COUNT);
                        if (ak == -2) return FAIL(c, as, "escaped key");
                        p = ak >= 0 ? scan_value(c, p, &e->arg[ak], 3) : skip_value(c, p, 3);
                        if (!p) return NULL;
                        if (ak >= 0 && !types_ok(ARG_TYPES[ak], &e->arg[ak])) return FAIL(c, as, "ill-typed value");
                        p = skip_ws(p, end);
                        if (p >= end) return INCOMPLETE(c, p);
                        if (*p == ',') {
                            p = skip_ws(p + 1, end);
                            if (p >= end) return INCOMPLETE(c, p);
                            continue;
                        }
                        if (*p == '}') {
                            p++;
                            break;
                        }
                        return FAIL(c, p, "expected ',' or '}'");
                    }
                }
            } else {
                Val v;
                p = scan_value(c, p, &v, 2);
                if (!p) return NULL;
                if (v.t != V_NULL) return FAIL(c, p, "args is not an object");
                for (int i = 0; i < A_COUNT; i++) e->arg[i].t = V_NONE;
                e->ev[E_ARGS].t = V_NULL;
            }
        } else if (k >= 0) {
            p = scan_value(c, p, &e->ev[k], 2);
            if (p && !types_ok(EVENT_TYPES[k], &e->ev[k])) return FAIL(c, ks, "ill-typed value");
        } else {
            p = skip_value(c, p, 2);
        }
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return INCOMPLETE(c, p);
        if (*p == ',') {
            p = skip_ws(p + 1, end);
            if (p >= end) return INCOMPLETE(c, p);
            continue;
        }
        if (*p == '}') return p + 1;
        return FAIL(c, p, "expected ',' or '}'");
    }
}

static size_t CAT_LENS[64];

static const CatSpec *find_cat(const Val *v) {
    for (int i = 0; CATS[i].cat; i++)
        if (CAT_LENS[i] == v->n && memcmp(CATS[i].cat, v->s, v->n) == 0) return &CATS[i];
    return NULL;
}

/*
 * Decode events from buf[start:end]. Returns 0 and sets *stop (offset of the first byte not
 * consumed) and *closed (the array's ']' was read); or -1 with an error (c->err).
 */
/*
 * Separators, as the Python path reads them without a warning: any blank space and commas before
 * the first event and before the closing ']' (reader._skip_separators, _rstrip_separators), and
 * exactly one comma between two events (msgspec rejects ",," or a missing comma there, and the
 * Python path then reads the event leniently, with a warning: refused here).
 */
enum { SEP_START = 0, SEP_AFTER_EVENT, SEP_AFTER_COMMA, SEP_EXTRA_COMMAS };

static int decode_range(Decoder *self, Cur *c, const char *start, int final, const char **stop, int *closed) {
    const char *p = start, *end = c->end;
    Event e;
    *closed = 0;
    for (;;) {
        for (; p < end; p++) {
            char ch = *p;
            if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') continue;
            if (ch != ',') break;
            if (self->sep == SEP_AFTER_EVENT) self->sep = SEP_AFTER_COMMA;
            else if (self->sep == SEP_AFTER_COMMA) self->sep = SEP_EXTRA_COMMAS;
        }
        if (p >= end) {
            *stop = p;
            if (final) {
                c->err = ERR_BAD;
                c->why = "the events array does not close";
                c->at = p;
                return -1;
            }
            return 0;
        }
        if (*p == ']') {
            *stop = p + 1;
            *closed = 1;
            return 0;
        }
        if (*p != '{') {
            c->err = ERR_BAD;
            c->why = "an event is not an object";
            c->at = p;
            return -1;
        }
        if (self->sep == SEP_AFTER_EVENT || self->sep == SEP_EXTRA_COMMAS) {
            c->err = ERR_BAD;
            c->why = self->sep == SEP_AFTER_EVENT ? "no comma between two events" : "repeated commas between events";
            c->at = p;
            return -1;
        }
        const char *ev_start = p;
        const char *q = scan_event(c, p, &e);
        if (!q && c->err == ERR_INCOMPLETE && (size_t)(end - ev_start) > MAX_EVENT_BYTES) {
            c->err = ERR_BAD; /* already over the limit: the Python path skips it with a warning */
            c->why = "an event larger than MAX_EVENT_BYTES";
            c->at = ev_start;
            return -1;
        }
        if (q && (size_t)(q - ev_start) > MAX_EVENT_BYTES) {
            c->err = ERR_BAD;
            c->why = "an event larger than MAX_EVENT_BYTES";
            c->at = ev_start;
            return -1;
        }
        if (!q) {
            if (c->err == ERR_INCOMPLETE && !final) {
                c->err = 0;
                *stop = ev_start;
                return 0;
            }
            if (c->err == ERR_INCOMPLETE) {
                c->err = ERR_BAD;
                c->why = "the last event is cut off";
            }
            return -1;
        }
        p = q;
        self->sep = SEP_AFTER_EVENT;
        self->events++;
        const Val *cat = &e.ev[E_CAT];
        const CatSpec *cs = NULL;
        if (cat->t == V_STRE) {
            c->err = ERR_BAD;
            c->why = "escaped category";
            c->at = ev_start;
            return -1;
        }
        if (cat->t == V_STR) cs = find_cat(cat);
        if (!cs) {
            /* metadata, unknown or untyped categories: the Python path reads these */
            int64_t endoff = 0;
            if (buf_put(&self->punted, ev_start, (size_t)(p - ev_start))) goto memory;
            endoff = (int64_t)self->punted.len;
            if (buf_put(&self->punted_ends, &endoff, sizeof endoff)) goto memory;
            continue;
        }
        if (cs->family == F_LAUNCH_FLOWS) continue;
        int r = add_event(self, &e, cs->family, cs->flag);
        if (r == -1) goto memory;
        if (r == -2) {
            c->err = ERR_BAD;
            c->why = "a value of a type the native decoder leaves to the Python path";
            c->at = ev_start;
            return -1;
        }
    }
memory:
    c->err = ERR_MEMORY;
    c->why = "out of memory";
    c->at = p;
    return -1;
}

static PyObject *Decoder_feed(Decoder *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    int final;
    if (!PyArg_ParseTuple(args, "y*nnp", &view, &start, &end, &final)) return NULL;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "range outside the buffer");
        return NULL;
    }
    if (self->busy) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "decoder in use by another thread");
        return NULL;
    }
    self->busy = 1;
    const char *base = (const char *)view.buf;
    Cur c = {base, base + end, 0, NULL, NULL};
    const char *stop = NULL;
    int closed = 0, r;
    Py_BEGIN_ALLOW_THREADS
    r = decode_range(self, &c, base + start, final, &stop, &closed);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&view);
    if (r) {
        if (c.err == ERR_MEMORY) return PyErr_NoMemory();
        PyErr_Format(Unsupported, "%s at byte %zd", c.why ? c.why : "unreadable", (Py_ssize_t)(c.at - base));
        return NULL;
    }
    return Py_BuildValue("nO", (Py_ssize_t)(stop - base), closed ? Py_True : Py_False);
}

/* ---------------------------------------------------------------------------------------------- */
/* export                                                                                           */

static PyObject *bytes_or_none(const char *s, int64_t off, int64_t len) {
    if (off < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(s + off, (Py_ssize_t)len);
}

static PyObject *export_column(Decoder *self, Buf *b, char kind, size_t rows) {
    if (kind == 'R' || kind == 'S') {
        PyObject *list = PyList_New((Py_ssize_t)rows);
        if (!list) return NULL;
        const int64_t *pairs = (const int64_t *)b->data;
        for (size_t i = 0; i < rows; i++) {
            int64_t off = pairs[2 * i], len = pairs[2 * i + 1];
            PyObject *item;
            if (kind == 'S' && off >= 0 && len < 0) {
                /* an escaped string body: (b"\\", body) tells Python to decode it as JSON */
                PyObject *body = PyBytes_FromStringAndSize(self->raw.data + off, (Py_ssize_t)(-len - 1));
                item = body ? Py_BuildValue("(N)", body) : NULL;
            } else {
                item = bytes_or_none(self->raw.data, off, len);
            }
            if (!item) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
        return list;
    }
    PyObject *ba = PyByteArray_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
    return ba;
}

static PyObject *export_names(Interner *it) {
    PyObject *list = PyList_New((Py_ssize_t)it->count);
    if (!list) return NULL;
    const uint32_t *pairs = (const uint32_t *)it->entries.data;
    for (size_t i = 0; i < it->count; i++) {
        PyObject *item;
        if (pairs[2 * i] == UINT32_MAX) {
            item = Py_None;
            Py_INCREF(item);
        } else {
            item = PyBytes_FromStringAndSize(it->arena.data + pairs[2 * i], (Py_ssize_t)pairs[2 * i + 1]);
            if (!item) {
                Py_DECREF(list);
                return NULL;
            }
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* {"families": [(family, rows, [(column, kind, data)])], "names": {family: [bytes|None]},
 *  "punted": [bytes], "events": n}. Frees the columns as it goes. */
static PyObject *Decoder_export(Decoder *self, PyObject *Py_UNUSED(ignored)) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "decoder in use by another thread");
        return NULL;
    }
    PyObject *out = PyDict_New(), *families = PyList_New(0), *names = PyDict_New(), *punted = PyList_New(0);
    if (!out || !families || !names || !punted) goto fail;
    for (int k = 0; k < self->n_order; k++) {
        int f = self->order[k];
        const ColSpec *spec = FAMILY_COLS[f];
        PyObject *cols = PyList_New(0);
        if (!cols) goto fail;
        for (int i = 0; spec[i].name; i++) {
            PyObject *data = export_column(self, &self->fam[f].cols[i], spec[i].kind, self->fam[f].rows);
            if (!data) {
                Py_DECREF(cols);
                goto fail;
            }
            PyObject *t = Py_BuildValue("(sCN)", spec[i].name, (int)spec[i].kind, data);
            if (!t || PyList_Append(cols, t)) {
                Py_XDECREF(t);
                Py_DECREF(cols);
                goto fail;
            }
            Py_DECREF(t);
            buf_free(&self->fam[f].cols[i]);
        }
        PyObject *t = Py_BuildValue("(snN)", FAMILY_NAMES[f], (Py_ssize_t)self->fam[f].rows, cols);
        if (!t || PyList_Append(families, t)) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
        if (f != F_FLOWS && f != F_COLLECTIVES) { /* the families with a name column */
            PyObject *nl = export_names(&self->names[f]);
            if (!nl || PyDict_SetItemString(names, FAMILY_NAMES[f], nl)) {
                Py_XDECREF(nl);
                goto fail;
            }
            Py_DECREF(nl);
        }
    }
    const int64_t *ends = (const int64_t *)self->punted_ends.data;
    size_t n_punted = self->punted_ends.len / sizeof(int64_t);
    int64_t prev = 0;
    for (size_t i = 0; i < n_punted; i++) {
        PyObject *b = PyBytes_FromStringAndSize(self->punted.data + prev, (Py_ssize_t)(ends[i] - prev));
        if (!b || PyList_Append(punted, b)) {
            Py_XDECREF(b);
            goto fail;
        }
        Py_DECREF(b);
        prev = ends[i];
    }
    if (PyDict_SetItemString(out, "families", families) || PyDict_SetItemString(out, "names", names) ||
        PyDict_SetItemString(out, "punted", punted))
        goto fail;
    PyObject *ne = PyLong_FromLongLong(self->events);
    if (!ne || PyDict_SetItemString(out, "events", ne)) {
        Py_XDECREF(ne);
        goto fail;
    }
    Py_DECREF(ne);
    Py_DECREF(families);
    Py_DECREF(names);
    Py_DECREF(punted);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(families);
    Py_XDECREF(names);
    Py_XDECREF(punted);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* type boilerplate                                                                                 */

static void Decoder_clear_all(Decoder *self) {
    for (int f = 0; f < F_COUNT; f++) {
        for (int i = 0; i < MAX_COLS; i++) buf_free(&self->fam[f].cols[i]);
        interner_free(&self->names[f]);
    }
    buf_free(&self->raw);
    buf_free(&self->punted);
    buf_free(&self->punted_ends);
}

static void Decoder_dealloc(Decoder *self) {
    Decoder_clear_all(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Decoder_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist)) return NULL;
    Decoder *self = (Decoder *)type->tp_alloc(type, 0); /* zeroed */
    return (PyObject *)self;
}

static PyObject *Decoder_get_events(Decoder *self, void *closure) { return PyLong_FromLongLong(self->events); }

static PyMethodDef Decoder_methods[] = {
    {"feed", (PyCFunction)Decoder_feed, METH_VARARGS,
     "feed(buffer, start, end, final) -> (stop, closed): decode the events of buffer[start:end]; stop is the "
     "offset of the first byte not consumed (the start of an event cut by `end`), closed is True when the "
     "events array's ']' was read. Raises Unsupported for what only the Python path reads."},
    {"export", (PyCFunction)Decoder_export, METH_NOARGS, "The decoded columns (and releases them)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Decoder_getset[] = {{"events", (getter)Decoder_get_events, NULL, "events read", NULL},
                                       {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "traceadvisor.trace._kineto.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Columnar decoder of Kineto trace events.",
    .tp_new = Decoder_new,
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_methods = Decoder_methods,
    .tp_getset = Decoder_getset,
};

static struct PyModuleDef kineto_module = {PyModuleDef_HEAD_INIT, "_kineto",
                                           "Native columnar decoder of Kineto trace events.", -1, NULL};

PyMODINIT_FUNC PyInit__kineto(void) {
    for (int i = 0; i < A_COUNT; i++) ARG_LENS[i] = strlen(ARG_KEYS[i]);
    for (int i = 0; i < E_COUNT; i++) EVENT_LENS[i] = strlen(EVENT_KEYS[i]);
    for (int i = 0; CATS[i].cat; i++) CAT_LENS[i] = strlen(CATS[i].cat);
    for (int i = 0; i < 256; i++) STR_SPECIAL[i] = (i == '"' || i == '\\' || i < 0x20 || i >= 0x80);
    struct lconv *lc = localeconv();
    decimal_point_ok = lc && lc->decimal_point && strcmp(lc->decimal_point, ".") == 0;
    if (PyType_Ready(&DecoderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&kineto_module);
    if (!m) return NULL;
    Unsupported = PyErr_NewException("traceadvisor.trace._kineto.Unsupported", PyExc_ValueError, NULL);
    if (!Unsupported || PyModule_AddObject(m, "Unsupported", Unsupported)) return NULL;
    Py_INCREF(&DecoderType);
    if (PyModule_AddObject(m, "Decoder", (PyObject *)&DecoderType)) return NULL;
    if (PyModule_AddIntConstant(m, "ABI", 2) || PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) ||
        PyModule_AddIntConstant(m, "MAX_EVENT_BYTES", (long)MAX_EVENT_BYTES))
        return NULL;
    return m;
}
