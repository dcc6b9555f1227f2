/* The send path's hot loop, compiled: plain SEND_MESSAGE(_V2) requests straight from the connection's
 * buffer, and their commit-log records.
 *
 * This is an accelerator, not a second definition of the protocol. scan_sends() accepts only a strict
 * subset of what rmqha/broker/remoting/codec.py and rmqha/broker/processors/send.py accept (a JSON header with the
 * usual keys, string extFields under one naming, canonical numbers, properties without the ones that
 * change where or how a message is stored) and STOPS at the first frame it is not sure of: the Python
 * path then decodes that frame and decides, errors included. encode_records() writes the bytes
 * rmqha/broker/store/record.py's encode() writes for the same message. Both are checked against the Python
 * path by tests/unit/fastpath and by the fuzzer (fuzz/targets: send_fastpath).
 *
 * Every read is bounds-checked against the frame; nothing here keeps state between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define SEND_MESSAGE 10
#define SEND_MESSAGE_V2 310
#define NFIELDS 14
#define MAX_EXT 32  /* extFields members a scan reads; more: the Python path */
#define MAX_PROPS 64
#define MAX_PROPERTIES_BYTES 32767
#define MAX_TOPIC_BYTES 127
#define MESSAGE_MAGIC 0xDAA320A7u
#define END_FILE_MIN_BLANK_LENGTH 8

/* SendMessageRequestHeader's fields, in V2's order a..n (WIRE-FACTS 2.3). */
enum { F_GROUP, F_TOPIC, F_DEFAULT_TOPIC, F_DEFAULT_QUEUES, F_QUEUE_ID, F_SYS_FLAG, F_BORN_TS, F_FLAG,
       F_PROPERTIES, F_RECONSUME, F_UNIT_MODE, F_MAX_RECONSUME, F_BATCH, F_BROKER_NAME };
static const char *const LONG_NAMES[NFIELDS] = {
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
    "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch",
    "brokerName"};

typedef struct { const unsigned char *p; Py_ssize_t n; } span;

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline const unsigned char *skip_ws(const unsigned char *s, const unsigned char *e) {
    while (s < e && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++;
    return s;
}

/* Length of the valid UTF-8 sequence at s (as CPython's strict decoder accepts it), 0 if invalid. */
static int utf8_seq(const unsigned char *s, const unsigned char *e) {
    unsigned char c = s[0];
    Py_ssize_t avail = e - s;
    if (c >= 0xC2 && c <= 0xDF) {
        return (avail >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (avail < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && s[1] > 0x9F) return 0;  /* a surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (avail < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
        if (c == 0xF4 && s[1] > 0x8F) return 0;  /* above U+10FFFF */
        return 4;
    }
    return 0;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A JSON string at s (which must be '"'), decoded to UTF-8 at out (room: the bytes up to e; a decoded
 * string is never longer than its JSON text). Returns the position after the closing quote, or NULL for
 * anything json.loads would refuse and for surrogate escapes (the Python path replaces lone ones). */
static const unsigned char *parse_string(const unsigned char *s, const unsigned char *e,
                                         unsigned char *out, Py_ssize_t *outlen) {
    Py_ssize_t o = 0;
    if (s >= e || *s != '"') return NULL;
    s++;
    while (s < e) {
        unsigned char c = *s;
        if (c == '"') {
            *outlen = o;
            return s + 1;
        }
        if (c < 0x20) return NULL;
        if (c == '\\') {
            if (e - s < 2) return NULL;
            unsigned char x = s[1];
            switch (x) {
            case '"': case '\\': case '/': out[o++] = x; break;
            case 'b': out[o++] = '\b'; break;
            case 'f': out[o++] = '\f'; break;
            case 'n': out[o++] = '\n'; break;
            case 'r': out[o++] = '\r'; break;
            case 't': out[o++] = '\t'; break;
            case 'u': {
                if (e - s < 6) return NULL;
                int v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(s[k]);
                    if (h < 0) return NULL;
                    v = (v << 4) | h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return NULL;
                if (v < 0x80) {
                    out[o++] = (unsigned char)v;
                } else if (v < 0x800) {
                    out[o++] = (unsigned char)(0xC0 | (v >> 6));
                    out[o++] = (unsigned char)(0x80 | (v & 0x3F));
                } else {
                    out[o++] = (unsigned char)(0xE0 | (v >> 12));
                    out[o++] = (unsigned char)(0x80 | ((v >> 6) & 0x3F));
                    out[o++] = (unsigned char)(0x80 | (v & 0x3F));
                }
                s += 6;
                continue;
            }
            default: return NULL;
            }
            s += 2;
            continue;
        }
        if (c < 0x80) {
            out[o++] = c;
            s++;
            continue;
        }
        int n = utf8_seq(s, e);
        if (!n) return NULL;
        memcpy(out + o, s, n);
        o += n;
        s += n;
    }
    return NULL;
}

/* A JSON integer that json.loads reads as an int and the codec as a 32-bit field; NULL otherwise
 * (fractions, exponents, leading zeros, out of range, null: the Python path decides). */
static const unsigned char *parse_json_int32(const unsigned char *s, const unsigned char *e, int32_t *out) {
    int neg = 0;
    if (s < e && *s == '-') { neg = 1; s++; }
    if (s >= e || *s < '0' || *s > '9') return NULL;
    if (*s == '0' && s + 1 < e && s[1] >= '0' && s[1] <= '9') return NULL;
    int64_t v = 0;
    int digits = 0;
    while (s < e && *s >= '0' && *s <= '9') {
        if (++digits > 10) return NULL;
        v = v * 10 + (*s - '0');
        s++;
    }
    if (s < e && (*s == '.' || *s == 'e' || *s == 'E')) return NULL;
    if (neg) v = -v;
    if (v < INT32_MIN || v > INT32_MAX) return NULL;
    *out = (int32_t)v;
    return s;
}

/* A JSON integer of at most 19 digits, as the text str(int) gives for it. */
static const unsigned char *parse_json_long_text(const unsigned char *s, const unsigned char *e, span *out) {
    const unsigned char *start = s;
    if (s < e && *s == '-') s++;
    const unsigned char *digits = s;
    if (s >= e || *s < '0' || *s > '9') return NULL;
    if (*s == '0' && s + 1 < e && s[1] >= '0' && s[1] <= '9') return NULL;
    while (s < e && *s >= '0' && *s <= '9') s++;
    if (s - digits > 19) return NULL;
    if (s < e && (*s == '.' || *s == 'e' || *s == 'E')) return NULL;
    if (s - start == 2 && start[0] == '-' && start[1] == '0') {
        out->p = (const unsigned char *)"0";  /* str(-0) */
        out->n = 1;
    } else {
        out->p = start;
        out->n = s - start;
    }
    return s;
}

/* Java's Integer/Long.parseInt over a decoded header value ([+-]?[0-9]+, within bounds), as
 * command.java_parse_int reads it; 0 when it does not parse (the Python path answers the error). */
static int java_parse(span t, int64_t lo, int64_t hi, int64_t *out) {
    const unsigned char *s = t.p, *e = t.p + t.n;
    int neg = 0;
    if (s < e && (*s == '+' || *s == '-')) { neg = *s == '-'; s++; }
    if (s >= e) return 0;
    while (s < e - 1 && *s == '0') s++;  /* leading zeros: Java reads "007" as 7 */
    if (e - s > 19) return 0;
    uint64_t v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9') return 0;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return 0;
        int64_t r = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
        if (r < lo) return 0;
        *out = r;
    } else {
        if (v > (uint64_t)INT64_MAX || (int64_t)v > hi) return 0;
        *out = (int64_t)v;
    }
    return 1;
}

static int span_is(span t, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)t.n == n && memcmp(t.p, lit, n) == 0;
}

static int field_index(span key, int short_names) {
    if (short_names) {
        if (key.n == 1 && key.p[0] >= 'a' && key.p[0] <= 'n') return key.p[0] - 'a';
        return -1;
    }
    for (int k = 0; k < NFIELDS; k++)
        if (span_is(key, LONG_NAMES[k])) return k;
    return -1;
}

/* What one plain send request says, with spans into the scratch buffer. */
typedef struct {
    int32_t code, opaque, flag;
    span fields[NFIELDS];
    int have[NFIELDS];
    const unsigned char *body;
    Py_ssize_t body_len;
} send_header;

enum { K_CODE = 1, K_EXT = 2, K_FLAG = 4, K_LANGUAGE = 8, K_OPAQUE = 16, K_REMARK = 32, K_SERIALIZE = 64,
       K_VERSION = 128 };

/* extFields: an object of at most MAX_EXT string values. Which names count is decided once the code
 * is known (it may come after extFields). */
static const unsigned char *parse_ext(const unsigned char *s, const unsigned char *e, unsigned char **scratch,
                                      span *keys, span *vals, int *nkeys) {
    int n = 0;
    if (s >= e || *s != '{') return NULL;
    s = skip_ws(s + 1, e);
    if (s < e && *s == '}') { *nkeys = 0; return s + 1; }
    for (;;) {
        if (n >= MAX_EXT) return NULL;
        Py_ssize_t len;
        keys[n].p = *scratch;
        s = parse_string(s, e, *scratch, &len);
        if (!s) return NULL;
        keys[n].n = len;
        *scratch += len;
        s = skip_ws(s, e);
        if (s >= e || *s != ':') return NULL;
        s = skip_ws(s + 1, e);
        if (s < e && *s == '"') {
            vals[n].p = *scratch;
            s = parse_string(s, e, *scratch, &len);
            if (!s) return NULL;
            vals[n].n = len;
            *scratch += len;
        } else {
            /* An integer (the C++ client sends queueId, sysFlag, flag... as numbers): the codec reads
             * it as str(int), which is its JSON text but for "-0". Anything else (true, null, a
             * fraction, more digits than a long) is the Python path's. */
            s = parse_json_long_text(s, e, &vals[n]);
            if (!s) return NULL;
        }
        n++;
        s = skip_ws(s, e);
        if (s < e && *s == ',') { s = skip_ws(s + 1, e); continue; }
        if (s < e && *s == '}') { *nkeys = n; return s + 1; }
        return NULL;
    }
}

/* The JSON header of a plain send request (code 10 or 310, flag 0 or oneway), or 0. */
static int parse_header(const unsigned char *s, const unsigned char *e, unsigned char *scratch, send_header *h) {
    span ext_keys[MAX_EXT], ext_vals[MAX_EXT];
    int next = -1, seen = 0;
    int32_t flag = 0, ival;
    unsigned char *key = scratch;  /* keys are decoded here, then overwritten: values go after them */
    unsigned char *free_at = scratch;
    h->code = -1;
    h->flag = 0;
    h->opaque = 0;
    s = skip_ws(s, e);
    if (s >= e || *s != '{') return 0;
    s = skip_ws(s + 1, e);
    if (s < e && *s == '}') return 0;  /* no code */
    for (;;) {
        Py_ssize_t klen;
        s = parse_string(s, e, key = free_at, &klen);
        if (!s) return 0;
        span k = {key, klen};
        s = skip_ws(s, e);
        if (s >= e || *s != ':') return 0;
        s = skip_ws(s + 1, e);
        int bit;
        if (span_is(k, "code")) bit = K_CODE;
        else if (span_is(k, "extFields")) bit = K_EXT;
        else if (span_is(k, "flag")) bit = K_FLAG;
        else if (span_is(k, "language")) bit = K_LANGUAGE;
        else if (span_is(k, "opaque")) bit = K_OPAQUE;
        else if (span_is(k, "remark")) bit = K_REMARK;
        else if (span_is(k, "serializeTypeCurrentRPC")) bit = K_SERIALIZE;
        else if (span_is(k, "version")) bit = K_VERSION;
        else return 0;
        if (seen & bit) return 0;  /* json.loads keeps the last of duplicate keys: leave it to it */
        seen |= bit;
        switch (bit) {
        case K_CODE: case K_FLAG: case K_OPAQUE: case K_VERSION:
            s = parse_json_int32(s, e, &ival);
            if (!s) return 0;
            if (bit == K_CODE) h->code = ival;
            else if (bit == K_FLAG) flag = ival;
            else if (bit == K_OPAQUE) h->opaque = ival;
            break;
        case K_EXT: {
            unsigned char *at = free_at;
            s = parse_ext(s, e, &at, ext_keys, ext_vals, &next);
            if (!s) return 0;
            free_at = at;  /* the values stay */
            break;
        }
        case K_REMARK: case K_LANGUAGE: case K_SERIALIZE: {
            /* validated, not kept: a send reads none of them (a remark may also be null) */
            Py_ssize_t vlen;
            if (bit == K_REMARK && e - s >= 4 && memcmp(s, "null", 4) == 0) { s += 4; break; }
            s = parse_string(s, e, free_at, &vlen);
            if (!s) return 0;
            break;
        }
        }
        s = skip_ws(s, e);
        if (s < e && *s == ',') { s = skip_ws(s + 1, e); continue; }
        if (s < e && *s == '}') { s++; break; }
        return 0;
    }
    if (skip_ws(s, e) != e) return 0;
    /* a request, answered (0) or oneway (2: stored, not answered) */
    if (!(seen & K_CODE) || (flag != 0 && flag != 2) || next < 0) return 0;
    h->flag = flag;
    if (h->code != SEND_MESSAGE && h->code != SEND_MESSAGE_V2) return 0;
    int short_names = h->code == SEND_MESSAGE_V2;
    memset(h->have, 0, sizeof h->have);
    for (int k = 0; k < next; k++) {
        int f = field_index(ext_keys[k], short_names);
        if (f < 0) {
            /* A name the send does not read (the C++ client adds AccessKey, Signature, OnsChannel) is
             * ignored, as send.header_view ignores it; but a long name on V2 makes the Python path
             * rename the fields: its call. */
            if (short_names && field_index(ext_keys[k], 0) >= 0) return 0;
            continue;
        }
        if (h->have[f]) return 0;
        h->have[f] = 1;
        h->fields[f] = ext_vals[k];
    }
    return 1;
}

/* The properties a plain send stores: the client's (split and filtered as record.decode_properties
 * does), minus WAIT, plus CLUSTER. 0 for anything the Python path must see: a duplicate name, a value
 * holding a name-value separator, TRAN_MSG, DELAY or CLUSTER from the client, too many or too long. */
typedef struct {
    unsigned char *out;
    Py_ssize_t out_len;
    int wait_store_ok;
    span tags, keys, uniq;
    int have_tags, have_keys, have_uniq;
} stored_props;

static int build_properties(span text, span cluster, unsigned char *out, Py_ssize_t room, stored_props *sp) {
    span names[MAX_PROPS];
    int nnames = 0;
    Py_ssize_t o = 0;
    const unsigned char *s = text.p, *e = text.p + text.n;
    memset(sp, 0, sizeof *sp);
    sp->wait_store_ok = 1;
    sp->have_tags = sp->have_keys = sp->have_uniq = 0;
    while (s <= e) {
        const unsigned char *seg_end = s;
        while (seg_end < e && *seg_end != 0x02) seg_end++;
        const unsigned char *sep = s;
        while (sep < seg_end && *sep != 0x01) sep++;
        if (sep < seg_end && sep > s && seg_end - sep > 1) {
            span name = {s, sep - s}, value = {sep + 1, seg_end - sep - 1};
            if (memchr(value.p, 0x01, value.n)) return 0;
            if (nnames >= MAX_PROPS) return 0;
            for (int k = 0; k < nnames; k++)
                if (names[k].n == name.n && memcmp(names[k].p, name.p, name.n) == 0) return 0;
            names[nnames++] = name;
            if (span_is(name, "TRAN_MSG") || span_is(name, "DELAY") || span_is(name, "CLUSTER")) return 0;
            if (span_is(name, "WAIT")) {
                /* wait.lower() == "true" */
                sp->wait_store_ok = value.n == 4 && (value.p[0] | 0x20) == 't' && (value.p[1] | 0x20) == 'r'
                                    && (value.p[2] | 0x20) == 'u' && (value.p[3] | 0x20) == 'e';
            } else {
                if (span_is(name, "TAGS")) { sp->tags = value; sp->have_tags = 1; }
                else if (span_is(name, "KEYS")) { sp->keys = value; sp->have_keys = 1; }
                else if (span_is(name, "UNIQ_KEY")) { sp->uniq = value; sp->have_uniq = 1; }
                Py_ssize_t need = (o ? 1 : 0) + name.n + 1 + value.n;
                if (o + need > room) return 0;
                if (o) out[o++] = 0x02;
                memcpy(out + o, name.p, name.n); o += name.n;
                out[o++] = 0x01;
                memcpy(out + o, value.p, value.n); o += value.n;
            }
        }
        if (seg_end >= e) break;
        s = seg_end + 1;
    }
    Py_ssize_t need = (o ? 1 : 0) + 8 + cluster.n;
    if (o + need > room) return 0;
    if (o) out[o++] = 0x02;
    memcpy(out + o, "CLUSTER\x01", 8); o += 8;
    memcpy(out + o, cluster.p, cluster.n); o += cluster.n;
    if (o > MAX_PROPERTIES_BYTES) return 0;
    sp->out = out;
    sp->out_len = o;
    return 1;
}

/* Whether command.lenient_parse_boolean reads a batch flag as false (strip().lower() not "true" or
 * "1"): decided here only for printable ASCII ("0" and "false" are what clients send). */
static int not_batch(span t) {
    const unsigned char *s = t.p, *e = t.p + t.n;
    for (const unsigned char *q = s; q < e; q++)
        if (*q < 0x21 || *q > 0x7E) return 0;
    if (t.n == 1 && s[0] == '1') return 0;
    if (t.n == 4 && (s[0] | 0x20) == 't' && (s[1] | 0x20) == 'r' && (s[2] | 0x20) == 'u' && (s[3] | 0x20) == 'e')
        return 0;
    return 1;
}

/* Java's String.hashCode() continued over the UTF-16 code units of valid UTF-8 text (mod 2^32). */
static uint32_t java_hash_utf8(uint32_t h, span t) {
    const unsigned char *p = t.p, *e = t.p + t.n;
    while (p < e) {
        uint32_t cp;
        unsigned char c = *p;
        if (c < 0x80) { cp = c; p += 1; }
        else if (c < 0xE0) { cp = ((uint32_t)(c & 0x1F) << 6) | (p[1] & 0x3F); p += 2; }
        else if (c < 0xF0) { cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F); p += 3; }
        else {
            cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6)
                 | (p[3] & 0x3F);
            p += 4;
        }
        if (cp < 0x10000) {
            h = 31 * h + cp;
        } else {
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            h = 31 * h + (0xDC00 + (cp & 0x3FF));
        }
    }
    return h;
}

/* IndexFile.indexKeyHashMethod of "topic#key": Math.abs(hashCode), 0 when still negative. */
static PyObject *key_hash(uint32_t prefix, span key) {
    int32_t h = (int32_t)java_hash_utf8(prefix, key);
    return PyLong_FromLong(h == INT32_MIN ? 0 : (h < 0 ? -(long)h : h));
}

/* The index keys' hashes of a record, in index.keys_of's order: UNIQ_KEY, then each non-empty
 * space-separated KEYS entry (what index.key_hashes computes). The text here is valid UTF-8. */
static PyObject *index_hashes(span topic, const stored_props *sp) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    uint32_t prefix = 31 * java_hash_utf8(0, topic) + '#';
    if (sp->have_uniq) {
        PyObject *h = key_hash(prefix, sp->uniq);
        if (!h || PyList_Append(out, h) < 0) { Py_XDECREF(h); Py_DECREF(out); return NULL; }
        Py_DECREF(h);
    }
    if (sp->have_keys) {
        const unsigned char *s = sp->keys.p, *e = sp->keys.p + sp->keys.n;
        while (s < e) {
            const unsigned char *q = s;
            while (q < e && *q != ' ') q++;
            if (q > s) {
                PyObject *h = key_hash(prefix, (span){s, q - s});
                if (!h || PyList_Append(out, h) < 0) { Py_XDECREF(h); Py_DECREF(out); return NULL; }
                Py_DECREF(h);
            }
            s = q + 1;
        }
    }
    return out;
}

static PyObject *str_or_none(int have, span t) {
    if (!have) Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8((const char *)t.p, t.n, "strict");
}

/* One frame -> the tuple send.py's fast path reads (see rmqha/broker/fastpath/__init__.py: FIELDS), or
 * Py_None when the frame is not a plain send. */
static PyObject *scan_frame(const unsigned char *frame, Py_ssize_t length, Py_ssize_t max_header,
                            span cluster, Py_ssize_t frame_start) {
    uint32_t word = be32(frame);
    Py_ssize_t hlen = word & 0xFFFFFF;
    if ((word >> 24) != 0 || hlen > length - 4 || hlen > max_header) Py_RETURN_NONE;
    const unsigned char *hs = frame + 4, *he = frame + 4 + hlen;
    /* decoded strings (header text at most), then the stored properties (at most the properties'
     * text plus CLUSTER) */
    Py_ssize_t room = hlen + hlen + cluster.n + 16;
    unsigned char *scratch = PyMem_Malloc(room);
    if (!scratch) return PyErr_NoMemory();
    PyObject *result = NULL;
    send_header h;
    if (!parse_header(hs, he, scratch, &h)) goto not_plain;
    if (!h.have[F_TOPIC] || !h.have[F_QUEUE_ID]) goto not_plain;
    int64_t dqn = 4, queue_id, sys_flag = 0, born_ts = 0, flag = 0, reconsume = 0, max_reconsume = 0;
    if (h.have[F_DEFAULT_QUEUES] && !java_parse(h.fields[F_DEFAULT_QUEUES], INT32_MIN, INT32_MAX, &dqn)) goto not_plain;
    if (!java_parse(h.fields[F_QUEUE_ID], INT32_MIN, INT32_MAX, &queue_id)) goto not_plain;
    if (h.have[F_SYS_FLAG] && !java_parse(h.fields[F_SYS_FLAG], INT32_MIN, INT32_MAX, &sys_flag)) goto not_plain;
    if (h.have[F_BORN_TS] && !java_parse(h.fields[F_BORN_TS], INT64_MIN, INT64_MAX, &born_ts)) goto not_plain;
    if (h.have[F_FLAG] && !java_parse(h.fields[F_FLAG], INT32_MIN, INT32_MAX, &flag)) goto not_plain;
    if (h.have[F_RECONSUME] && !java_parse(h.fields[F_RECONSUME], INT32_MIN, INT32_MAX, &reconsume)) goto not_plain;
    if (h.have[F_MAX_RECONSUME] && !java_parse(h.fields[F_MAX_RECONSUME], INT32_MIN, INT32_MAX, &max_reconsume))
        goto not_plain;
    if (h.have[F_BATCH] && !not_batch(h.fields[F_BATCH])) goto not_plain;
    if (h.fields[F_TOPIC].n == 0 || h.fields[F_TOPIC].n > MAX_TOPIC_BYTES) goto not_plain;
    stored_props sp;
    span props_text = h.have[F_PROPERTIES] ? h.fields[F_PROPERTIES] : (span){scratch, 0};
    unsigned char *props_out = scratch + hlen;
    if (!build_properties(props_text, cluster, props_out, room - hlen, &sp)) goto not_plain;

    Py_ssize_t body_start = frame_start + 4 + 4 + hlen;
    result = Py_BuildValue(
        "(nnnN N N L n L L L L N O y# N N N N O)",
        frame_start, frame_start + 4 + length, body_start,
        PyUnicode_DecodeUTF8((const char *)h.fields[F_TOPIC].p, h.fields[F_TOPIC].n, "strict"),
        h.have[F_DEFAULT_TOPIC] ? PyUnicode_DecodeUTF8((const char *)h.fields[F_DEFAULT_TOPIC].p,
                                                       h.fields[F_DEFAULT_TOPIC].n, "strict")
                                : (Py_INCREF(Py_None), Py_None),
        h.have[F_MAX_RECONSUME] ? PyLong_FromLongLong(max_reconsume) : (Py_INCREF(Py_None), Py_None),
        (long long)h.opaque, (Py_ssize_t)dqn, (long long)queue_id, (long long)sys_flag, (long long)born_ts,
        (long long)flag, PyLong_FromLongLong(reconsume), sp.wait_store_ok ? Py_True : Py_False,
        (const char *)sp.out, sp.out_len,
        str_or_none(sp.have_tags, sp.tags), str_or_none(sp.have_keys, sp.keys), str_or_none(sp.have_uniq, sp.uniq),
        index_hashes(h.fields[F_TOPIC], &sp), h.flag ? Py_True : Py_False);
    PyMem_Free(scratch);
    return result;
not_plain:
    PyMem_Free(scratch);
    Py_RETURN_NONE;
}

/* scan_sends(buffer, pos, end, max_frame_length, max_header_length, cluster, limit)
 *   -> (list of send tuples, position after the last one)
 * Consecutive complete plain-send frames from pos; stops before anything else (an incomplete frame,
 * a bad length, another request) without judging it. */
static PyObject *scan_sends(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    Py_ssize_t pos, end, max_frame, max_header, limit;
    const char *cluster;
    Py_ssize_t cluster_len;
    if (!PyArg_ParseTuple(args, "y*nnnns#n", &buf, &pos, &end, &max_frame, &max_header, &cluster, &cluster_len,
                          &limit))
        return NULL;
    PyObject *out = NULL;
    if (pos < 0 || end > buf.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos/end outside the buffer");
        goto done;
    }
    out = PyList_New(0);
    if (!out) goto done;
    const unsigned char *b = buf.buf;
    span cl = {(const unsigned char *)cluster, cluster_len};
    while (PyList_GET_SIZE(out) < limit && end - pos >= 4) {
        uint32_t length = be32(b + pos);
        if (length < 4 || (Py_ssize_t)length + 4 > max_frame || end - pos - 4 < (Py_ssize_t)length) break;
        PyObject *t = scan_frame(b + pos + 4, length, max_header, cl, pos);
        if (!t) { Py_CLEAR(out); goto done; }
        if (t == Py_None) { Py_DECREF(t); break; }
        int r = PyList_Append(out, t);
        Py_DECREF(t);
        if (r < 0) { Py_CLEAR(out); goto done; }
        pos += 4 + (Py_ssize_t)length;
    }
done:
    PyBuffer_Release(&buf);
    if (!out) return NULL;
    return Py_BuildValue("(Nn)", out, pos);
}

/* Tuple positions (FIELDS in rmqha/broker/fastpath/__init__.py). */
enum { T_START, T_END, T_BODY, T_TOPIC, T_DEFAULT_TOPIC, T_MAX_RECONSUME, T_OPAQUE, T_DEFAULT_QUEUES, T_QUEUE_ID,
       T_SYS_FLAG, T_BORN_TS, T_FLAG, T_RECONSUME, T_WAIT, T_PROPS, T_TAGS, T_KEYS, T_UNIQ, T_HASHES, T_ONEWAY,
       T_COUNT };

static inline unsigned char *put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
    return p + 4;
}
static inline unsigned char *put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    return put32(p + 4, (uint32_t)v);
}

/* One send's record, read in full before anything is written (nothing from Python runs after). */
typedef struct {
    PyObject *send;  /* a reference held: its topic and properties stay alive */
    const char *topic, *props;
    Py_ssize_t topic_len, props_len, body_start, body_len, size;
    long long queue_offset, born_ts;
    long queue_id, flag, sys_flag, reconsume;
} record_in;

static int exact_long(PyObject *o, long long lo, long long hi, long long *out) {
    if (!PyLong_CheckExact(o)) {
        PyErr_SetString(PyExc_TypeError, "send fields and queue offsets must be ints");
        return 0;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || v < lo || v > hi) {
        PyErr_SetString(PyExc_ValueError, "a record field is out of its range");
        return 0;
    }
    *out = v;
    return 1;
}

static int read_send(PyObject *t, PyObject *qoff, Py_ssize_t src_len, Py_ssize_t fixed, record_in *r) {
    long long v;
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != T_COUNT) {
        PyErr_SetString(PyExc_TypeError, "not a send tuple from scan_sends");
        return 0;
    }
    PyObject *topic = PyTuple_GET_ITEM(t, T_TOPIC), *props = PyTuple_GET_ITEM(t, T_PROPS);
    if (!PyUnicode_CheckExact(topic) || !PyBytes_CheckExact(props)) {
        PyErr_SetString(PyExc_TypeError, "a send's topic must be str and its properties bytes");
        return 0;
    }
    if (!exact_long(PyTuple_GET_ITEM(t, T_BODY), 0, src_len, &v)) return 0;
    r->body_start = (Py_ssize_t)v;
    if (!exact_long(PyTuple_GET_ITEM(t, T_END), r->body_start, src_len, &v)) return 0;
    r->body_len = (Py_ssize_t)v - r->body_start;
    if (!exact_long(qoff, INT64_MIN, INT64_MAX, &r->queue_offset)) return 0;
    if (!exact_long(PyTuple_GET_ITEM(t, T_QUEUE_ID), INT32_MIN, INT32_MAX, &v)) return 0;
    r->queue_id = (long)v;
    if (!exact_long(PyTuple_GET_ITEM(t, T_FLAG), INT32_MIN, INT32_MAX, &v)) return 0;
    r->flag = (long)v;
    if (!exact_long(PyTuple_GET_ITEM(t, T_SYS_FLAG), INT32_MIN, INT32_MAX, &v)) return 0;
    r->sys_flag = (long)v;
    if (!exact_long(PyTuple_GET_ITEM(t, T_RECONSUME), INT32_MIN, INT32_MAX, &v)) return 0;
    r->reconsume = (long)v;
    if (!exact_long(PyTuple_GET_ITEM(t, T_BORN_TS), INT64_MIN, INT64_MAX, &r->born_ts)) return 0;
    r->topic = PyUnicode_AsUTF8AndSize(topic, &r->topic_len);
    if (!r->topic) return 0;
    r->props = PyBytes_AS_STRING(props);
    r->props_len = PyBytes_GET_SIZE(props);
    if (r->topic_len < 1 || r->topic_len > MAX_TOPIC_BYTES || r->props_len > MAX_PROPERTIES_BYTES) {
        PyErr_SetString(PyExc_ValueError, "topic or properties too long for a record");
        return 0;
    }
    r->size = fixed + r->body_len + 1 + r->topic_len + 2 + r->props_len;
    if (r->size > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "record too large");
        return 0;
    }
    return 1;
}

/* encode_records(buffer, sends, i, j, queue_offsets, physical_offset, room, store_timestamp,
 *                born_host, store_host)
 *   -> (bytes, count, sizes, needed)
 * The records of sends[i:j] as record.encode() + finish() write them, back to back from physical_offset,
 * as many as fit in `room` bytes leaving END_FILE_MIN_BLANK_LENGTH free (a commit-log file's rule).
 * queue_offsets[k] belongs to sends[i + k]; born_host and store_host are the packed address (4 or 16
 * bytes) + port; `needed` is the size of the first record that did not fit, else 0. Every field is
 * read (and range-checked, as struct.pack would) before any byte is written. */
static PyObject *encode_records(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer src, born, store;
    PyObject *sends, *qoffs;
    Py_ssize_t i, j;
    long long phys, room, store_ts;
    if (!PyArg_ParseTuple(args, "y*O!nnO!LLLy*y*", &src, &PyList_Type, &sends, &i, &j, &PyList_Type, &qoffs,
                          &phys, &room, &store_ts, &born, &store))
        return NULL;
    PyObject *result = NULL, *sizes = NULL, *data = NULL;
    record_in *recs = NULL;
    Py_ssize_t n = 0, held = 0, total = 0, needed = 0;
    if ((born.len != 8 && born.len != 20) || (store.len != 8 && store.len != 20)) {
        PyErr_SetString(PyExc_ValueError, "hosts are 4 or 16 address bytes and a 4-byte port");
        goto done;
    }
    if (i < 0 || j > PyList_GET_SIZE(sends) || i > j || PyList_GET_SIZE(qoffs) < j - i) {
        PyErr_SetString(PyExc_ValueError, "send range outside the lists");
        goto done;
    }
    int v6 = (born.len == 20 ? 1 : 0) | (store.len == 20 ? 2 : 0);
    Py_ssize_t fixed = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born.len + 8 + store.len + 4 + 8 + 4;
    recs = PyMem_Calloc(j - i + 1, sizeof(record_in));
    if (!recs) { PyErr_NoMemory(); goto done; }
    /* First pass: read every field (this may allocate, so run the garbage collector and Python code:
     * the references held keep what is read alive), and count what fits. */
    for (Py_ssize_t k = i; k < j; k++) {
        record_in *r = &recs[n];
        r->send = PyList_GET_ITEM(sends, k);
        Py_INCREF(r->send);
        held = n + 1;
        if (!read_send(r->send, PyList_GET_ITEM(qoffs, k - i), src.len, fixed, r)) goto done;
        if (total + r->size + END_FILE_MIN_BLANK_LENGTH > room) { needed = r->size; break; }
        total += r->size;
        n++;
    }
    sizes = PyList_New(n);
    if (!sizes) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *sz = PyLong_FromSsize_t(recs[k].size);
        if (!sz) goto done;
        PyList_SET_ITEM(sizes, k, sz);
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    if (!data) goto done;
    /* Second pass: C only. */
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(data), *end = p + total;
    const unsigned char *b = src.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        const record_in *r = &recs[k];
        if (end - p < r->size) {  /* cannot happen: the sizes were summed above */
            PyErr_SetString(PyExc_RuntimeError, "record sizes changed while encoding");
            goto done;
        }
        uint32_t crc = (uint32_t)crc32(0L, b + r->body_start, (uInt)r->body_len) & 0x7FFFFFFFu;
        long sys_flag = (r->sys_flag & ~0x30L) | ((long)v6 << 4);
        unsigned char *q = p;
        q = put32(q, (uint32_t)r->size);
        q = put32(q, MESSAGE_MAGIC);
        q = put32(q, crc);
        q = put32(q, (uint32_t)r->queue_id);
        q = put32(q, (uint32_t)r->flag);
        q = put64(q, (uint64_t)r->queue_offset);
        q = put64(q, (uint64_t)phys);
        q = put32(q, (uint32_t)sys_flag);
        q = put64(q, (uint64_t)r->born_ts);
        memcpy(q, born.buf, born.len); q += born.len;
        q = put64(q, (uint64_t)store_ts);
        memcpy(q, store.buf, store.len); q += store.len;
        q = put32(q, (uint32_t)r->reconsume);
        q = put64(q, 0);  /* PREPAREDTRANSACTIONOFFSET: a plain message has none */
        q = put32(q, (uint32_t)r->body_len);
        memcpy(q, b + r->body_start, r->body_len); q += r->body_len;
        *q++ = (unsigned char)r->topic_len;
        memcpy(q, r->topic, r->topic_len); q += r->topic_len;
        *q++ = (unsigned char)(r->props_len >> 8);
        *q++ = (unsigned char)r->props_len;
        memcpy(q, r->props, r->props_len); q += r->props_len;
        p = q;
        phys += r->size;
    }
    result = Py_BuildValue("(OnOn)", data, n, sizes, needed);
done:
    if (recs) {
        for (Py_ssize_t k = 0; k < held; k++) Py_XDECREF(recs[k].send);
        PyMem_Free(recs);
    }
    Py_XDECREF(data);
    Py_XDECREF(sizes);
    PyBuffer_Release(&src);
    PyBuffer_Release(&born);
    PyBuffer_Release(&store);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_sends", scan_sends, METH_VARARGS,
     "scan_sends(buffer, pos, end, max_frame_length, max_header_length, cluster, limit) -> (sends, pos)"},
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(buffer, sends, i, j, queue_offsets, physical_offset, room, store_timestamp, born_host, "
     "store_host) -> (bytes, count, sizes, needed)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastsend", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastsend(void) { return PyModule_Create(&module); }
