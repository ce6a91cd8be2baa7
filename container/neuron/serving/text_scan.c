/* _text_scan: an inference request's body to token ids in one C call, for the common request only.
 *
 * The common request is the one the load test and most clients send: a JSON body of one TEXT tensor
 * ({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [n] or [n, 1], "data": [...]}]}), no id,
 * no parameters, no outputs, strings of printable ASCII without escapes. For it, Scanner.scan(body)
 * returns the token ids ascii_wordpiece.AsciiWordPiece.encode would give each text, reading the same
 * word cache (a dict it shares with that object and never writes). For any other body, and for any
 * text or word the cache cannot answer, it returns None and the server takes its Python path
 * (protocol.py, then ascii_wordpiece.py), which answers every request, malformed ones with their
 * 4xx, and fills the cache. So this module decides nothing the Python path would decide otherwise:
 * it only declines more often. tests/container/neuron/test_text_scan.py holds it to that.
 *
 * Replier.json(logits) writes such a request's reply, the bytes protocol.ModelInterface._json_response gives
 * (float32 logits, C-contiguous, finite; None otherwise, and the Python code writes it).
 *
 * Why C: at 32 connections a worker's turnaround between batches is sixteen requests' parsing and
 * tokenization in a row, and in Python those were about a fifth of a request's CPU
 * (docs/explanation/performance.md).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_TEXTS 1024 /* a request's texts gathered before tokenizing; more are left to the Python path */

typedef struct {
    PyObject_HEAD
    PyObject *cache;  /* dict: word (str) -> list of ids */
    PyObject *prefix; /* tuple of ids before the text's */
    PyObject *suffix; /* tuple of ids after them */
    PyObject *added;  /* tuple of bytes: the added tokens' lower-cased texts */
    Py_ssize_t budget;
    Py_ssize_t max_rows;
    Py_ssize_t max_chars;
    int lowercase;
} Scanner;

typedef struct {
    const char *p;
    const char *end;
} Cursor;

typedef struct {
    const char *start;
    Py_ssize_t length;
} Span;

static void skip_ws(Cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int expect(Cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int peek(Cursor *c, char ch)
{
    skip_ws(c);
    return c->p < c->end && *c->p == ch;
}

/* A string of printable ASCII with no escape: anything else is left to json.loads. */
static int read_string(Cursor *c, Span *out)
{
    if (!expect(c, '"'))
        return 0;
    const char *start = c->p;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            out->start = start;
            out->length = c->p - start;
            c->p++;
            return 1;
        }
        if (ch == '\\' || ch < 0x20 || ch > 0x7e)
            return 0;
        c->p++;
    }
    return 0;
}

static int is(const Span *s, const char *text)
{
    size_t n = strlen(text);
    return (size_t)s->length == n && memcmp(s->start, text, n) == 0;
}

/* A JSON integer as json.loads reads one into an int: no sign, no leading zero, at most 9 digits. A
 * fraction, an exponent (a float, which the Python path refuses) or a tenth digit fails the caller's
 * next expect. */
static int read_count(Cursor *c, Py_ssize_t *out)
{
    skip_ws(c);
    const char *start = c->p;
    Py_ssize_t value = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9' && c->p - start < 9)
        value = value * 10 + (*c->p++ - '0');
    Py_ssize_t digits = c->p - start;
    if (digits == 0 || (digits > 1 && *start == '0'))
        return 0; /* a tenth digit fails the caller's next expect too */
    *out = value;
    return 1;
}

/* "data": a list of strings, or a list of lists of strings (protocol._flatten's one level). */
static int read_data(Cursor *c, Span *texts, Py_ssize_t *count)
{
    if (!expect(c, '['))
        return 0;
    *count = 0;
    if (peek(c, ']'))
        return 0; /* no texts: the Python path says what is wrong */
    int nested = peek(c, '[');
    do {
        if (nested) {
            if (!expect(c, '[') || peek(c, ']'))
                return 0;
            do {
                if (*count == MAX_TEXTS || !read_string(c, &texts[*count]))
                    return 0;
                (*count)++;
            } while (expect(c, ','));
            if (!expect(c, ']'))
                return 0;
        } else {
            if (*count == MAX_TEXTS || !read_string(c, &texts[*count]))
                return 0;
            (*count)++;
        }
    } while (expect(c, ','));
    return expect(c, ']');
}

/* The one tensor: name, datatype, shape and data, each once, in any order, nothing else. */
static int read_tensor(Scanner *self, Cursor *c, Span *texts, Py_ssize_t *count)
{
    int seen_name = 0, seen_type = 0, seen_shape = 0, seen_data = 0;
    Py_ssize_t rows = 0;
    Span key, value;
    if (!expect(c, '{'))
        return 0;
    do {
        if (!read_string(c, &key) || !expect(c, ':'))
            return 0;
        if (is(&key, "name") && !seen_name) {
            if (!read_string(c, &value) || !is(&value, "TEXT"))
                return 0;
            seen_name = 1;
        } else if (is(&key, "datatype") && !seen_type) {
            if (!read_string(c, &value) || !is(&value, "BYTES"))
                return 0;
            seen_type = 1;
        } else if (is(&key, "shape") && !seen_shape) {
            Py_ssize_t second;
            if (!expect(c, '[') || !read_count(c, &rows))
                return 0;
            if (expect(c, ',') && (!read_count(c, &second) || second != 1))
                return 0;
            if (!expect(c, ']'))
                return 0;
            seen_shape = 1;
        } else if (is(&key, "data") && !seen_data) {
            if (!read_data(c, texts, count))
                return 0;
            seen_data = 1;
        } else {
            return 0; /* parameters, a repeated key, anything else */
        }
    } while (expect(c, ','));
    if (!expect(c, '}') || !(seen_name && seen_type && seen_shape && seen_data))
        return 0;
    return rows >= 1 && rows <= self->max_rows && rows == *count;
}

/* {"inputs": [tensor]} and nothing else, then only whitespace. */
static int read_body(Scanner *self, Cursor *c, Span *texts, Py_ssize_t *count)
{
    Span key;
    if (!expect(c, '{') || !read_string(c, &key) || !is(&key, "inputs") || !expect(c, ':'))
        return 0;
    if (!expect(c, '[') || !read_tensor(self, c, texts, count) || !expect(c, ']') || !expect(c, '}'))
        return 0;
    skip_ws(c);
    return c->p == c->end;
}

/* BertPreTokenizer's punctuation in printable ASCII (Rust's is_ascii_punctuation). */
static int is_punct(unsigned char ch)
{
    return (ch >= '!' && ch <= '/') || (ch >= ':' && ch <= '@') || (ch >= '[' && ch <= '`') || (ch >= '{' && ch <= '~');
}

static int extend(PyObject *row, PyObject *items)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    PyObject **item = PySequence_Fast_ITEMS(items);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyList_Append(row, item[i]) < 0)
            return -1;
    return 0;
}

/* One text's ids as AsciiWordPiece.encode gives them; Py_None when it would not answer or a word is
 * not cached; NULL on a Python error. ``low`` has room for the text. */
static PyObject *encode(Scanner *self, const Span *text, char *low)
{
    Py_ssize_t n = text->length;
    int blank = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)text->start[i];
        low[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : (char)ch;
        blank &= ch == ' ';
    }
    if (blank)
        Py_RETURN_NONE; /* empty or spaces only: the Python path's 400 (too long: Scanner_scan declined it) */
    Py_ssize_t n_added = PyTuple_GET_SIZE(self->added);
    for (Py_ssize_t a = 0; a < n_added; a++) {
        PyObject *token = PyTuple_GET_ITEM(self->added, a);
        Py_ssize_t size = PyBytes_GET_SIZE(token);
        const char *bytes = PyBytes_AS_STRING(token);
        /* The first byte filters (BERT's added tokens all start with '['): a memcmp call at every position
         * was about a twentieth of the event loop's time per request. */
        for (Py_ssize_t i = 0; i + size <= n; i++)
            if (low[i] == bytes[0] && memcmp(low + i, bytes, size) == 0)
                Py_RETURN_NONE; /* the library matches added tokens first */
    }
    const char *words = self->lowercase ? low : text->start;
    PyObject *row = PyList_New(0);
    if (row == NULL || extend(row, self->prefix) < 0)
        goto error;
    Py_ssize_t limit = self->budget + PyTuple_GET_SIZE(self->prefix);
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)words[i];
        if (ch == ' ') {
            i++;
            continue;
        }
        Py_ssize_t start = i++;
        if (!is_punct(ch))
            while (i < n && words[i] != ' ' && !is_punct((unsigned char)words[i]))
                i++;
        PyObject *word = PyUnicode_New(i - start, 127);
        if (word == NULL)
            goto error;
        memcpy(PyUnicode_1BYTE_DATA(word), words + start, i - start);
        PyObject *pieces = PyDict_GetItemWithError(self->cache, word); /* borrowed */
        Py_DECREF(word);
        if (pieces == NULL) {
            if (PyErr_Occurred())
                goto error;
            Py_DECREF(row);
            Py_RETURN_NONE; /* not cached: the Python path asks the library and caches it */
        }
        if (!PyList_CheckExact(pieces)) {
            PyErr_SetString(PyExc_TypeError, "the word cache holds a non-list");
            goto error;
        }
        if (extend(row, pieces) < 0)
            goto error;
        if (PyList_GET_SIZE(row) >= limit) {
            if (PyList_SetSlice(row, limit, PyList_GET_SIZE(row), NULL) < 0)
                goto error;
            break;
        }
    }
    if (extend(row, self->suffix) < 0)
        goto error;
    return row;
error:
    Py_XDECREF(row);
    return NULL;
}

/* The body's rows of ids (a new list), Py_None (new reference) to leave it to the Python path, or NULL with
 * an exception set. */
static PyObject *scan_span(Scanner *self, const char *start, Py_ssize_t length)
{
    Span texts[MAX_TEXTS];
    Py_ssize_t count = 0, longest = 0;
    Cursor cursor = {start, start + length};
    if (!read_body(self, &cursor, texts, &count))
        Py_RETURN_NONE;
    for (Py_ssize_t t = 0; t < count; t++)
        if (texts[t].length > longest)
            longest = texts[t].length;
    if (longest > self->max_chars)
        Py_RETURN_NONE;
    char *low = PyMem_Malloc(longest + 1);
    PyObject *rows = PyList_New(count);
    if (low == NULL || rows == NULL) {
        if (low == NULL)
            PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t t = 0; t < count; t++) {
        PyObject *row = encode(self, &texts[t], low);
        if (row == NULL)
            goto error;
        if (row == Py_None) {
            Py_DECREF(rows);
            PyMem_Free(low);
            return row;
        }
        PyList_SET_ITEM(rows, t, row);
    }
    PyMem_Free(low);
    return rows;
error:
    Py_XDECREF(rows);
    PyMem_Free(low);
    return NULL;
}

static PyObject *Scanner_scan(Scanner *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *rows = scan_span(self, (const char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return rows;
}

/* -- The HTTP front: a whole request in one read ------------------------------------------------------------
 *
 * Scanner.request(data, paths, max_body) takes what one read of a keep-alive connection brought, when it is
 * exactly one request of the common kind and nothing else:
 *
 *     POST <one of paths> HTTP/1.1 CRLF
 *     *( field-name ":" OWS field-value OWS CRLF )      names: RFC 9110 tokens; values: printable ASCII, SP, HTAB
 *     CRLF
 *     <Content-Length bytes: a body scan() answers>
 *
 * with exactly one Content-Length (1 to 9 digits, at most max_body), no Transfer-Encoding, Expect, Upgrade or
 * Inference-Header-Content-Length, a Connection field only if it says keep-alive, and the head within
 * MAX_HEAD bytes. It returns (the path's index, the rows scan() gives); None for anything else: another method,
 * path, version or field, a request cut short or followed by another (pipelined), a bare CR or LF, obs-fold,
 * obs-text, and every body scan() declines. Those reach the HTTP parser (httptools) untouched, as before, so
 * this decides nothing the parser and the Python path would decide otherwise; the tests hold it to that.
 *
 * Why: the parser calls Python back for the request line, each header, the body and the end, about a quarter
 * of the request's Python time on the event loop (docs/explanation/performance.md). */

#define MAX_HEAD 16384 /* within http_server.py's 64 KiB limit on the head, so nothing it refuses gets here */

static int is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

static int name_is(const char *name, Py_ssize_t length, const char *lower)
{
    if ((size_t)length != strlen(lower))
        return 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch >= 'A' && ch <= 'Z')
            ch += 'a' - 'A';
        if (ch != (unsigned char)lower[i])
            return 0;
    }
    return 1;
}

/* The head's end (the byte after its blank line) and the declared body length; 0 to decline. */
static int read_head(const char *p, const char *end, PyObject *paths, Py_ssize_t *index, const char **body,
                     Py_ssize_t *length)
{
    const char *limit = end - p > MAX_HEAD ? p + MAX_HEAD : end;
    if (limit - p < 5 || memcmp(p, "POST ", 5) != 0)
        return 0;
    p += 5;
    const char *target = p;
    while (p < limit && *p != ' ' && (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f)
        p++;
    Py_ssize_t target_length = p - target;
    if (limit - p < 11 || memcmp(p, " HTTP/1.1\r\n", 11) != 0)
        return 0;
    p += 11;
    *index = -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(paths); i++) {
        PyObject *path = PyTuple_GET_ITEM(paths, i);
        if (PyBytes_GET_SIZE(path) == target_length && memcmp(PyBytes_AS_STRING(path), target, target_length) == 0) {
            *index = i;
            break;
        }
    }
    if (*index < 0)
        return 0;
    int seen_length = 0;
    for (;;) {
        if (limit - p >= 2 && p[0] == '\r' && p[1] == '\n') {
            *body = p + 2;
            return seen_length;
        }
        const char *name = p;
        while (p < limit && is_tchar((unsigned char)*p))
            p++;
        Py_ssize_t name_length = p - name;
        if (name_length == 0 || p == limit || *p != ':')
            return 0;
        p++;
        while (p < limit && (*p == ' ' || *p == '\t'))
            p++;
        const char *value = p;
        while (p < limit && (*p == '\t' || ((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f)))
            p++;
        const char *value_end = p;
        while (value_end > value && (value_end[-1] == ' ' || value_end[-1] == '\t'))
            value_end--;
        if (limit - p < 2 || p[0] != '\r' || p[1] != '\n')
            return 0; /* a bare CR or LF, a control byte, obs-text, or the head too long */
        p += 2;
        Py_ssize_t value_length = value_end - value;
        if (name_is(name, name_length, "content-length")) {
            if (seen_length || value_length < 1 || value_length > 9)
                return 0;
            Py_ssize_t n = 0;
            for (Py_ssize_t i = 0; i < value_length; i++) {
                if (value[i] < '0' || value[i] > '9')
                    return 0;
                n = n * 10 + (value[i] - '0');
            }
            *length = n;
            seen_length = 1;
        } else if (name_is(name, name_length, "connection")) {
            if (!name_is(value, value_length, "keep-alive"))
                return 0;
        } else if (name_is(name, name_length, "transfer-encoding") || name_is(name, name_length, "expect") ||
                   name_is(name, name_length, "upgrade") ||
                   name_is(name, name_length, "inference-header-content-length")) {
            return 0;
        }
    }
}

static PyObject *Scanner_request(Scanner *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(args[1]) || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "request(data, paths: tuple of bytes, max_body: int)");
        return NULL;
    }
    PyObject *paths = args[1];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(paths); i++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(paths, i))) {
            PyErr_SetString(PyExc_TypeError, "paths must hold bytes");
            return NULL;
        }
    Py_ssize_t max_body = PyLong_AsSsize_t(args[2]);
    if (max_body == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *start = (const char *)view.buf, *end = start + view.len, *body = NULL;
    Py_ssize_t index = -1, length = 0;
    if (!read_head(start, end, paths, &index, &body, &length) || length > max_body || end - body != length) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    PyObject *rows = scan_span(self, body, length);
    PyBuffer_Release(&view);
    if (rows == NULL || rows == Py_None)
        return rows;
    return Py_BuildValue("(nN)", index, rows);
}

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"cache", "lowercase", "prefix", "suffix", "budget", "added", "max_rows", "max_chars", NULL};
    PyObject *cache, *prefix, *suffix, *added;
    int lowercase;
    Py_ssize_t budget, max_rows, max_chars;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$O!pO!O!nO!nn", keywords, &PyDict_Type, &cache, &lowercase,
                                     &PyTuple_Type, &prefix, &PyTuple_Type, &suffix, &budget, &PyTuple_Type, &added,
                                     &max_rows, &max_chars))
        return -1;
    if (budget < 1 || max_rows < 1 || max_chars < 1) {
        PyErr_SetString(PyExc_ValueError, "budget, max_rows and max_chars must be at least 1");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(added); i++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(added, i)) || PyBytes_GET_SIZE(PyTuple_GET_ITEM(added, i)) == 0) {
            PyErr_SetString(PyExc_TypeError, "added must hold non-empty bytes");
            return -1;
        }
    Py_INCREF(cache);
    Py_INCREF(prefix);
    Py_INCREF(suffix);
    Py_INCREF(added);
    Py_XSETREF(self->cache, cache);
    Py_XSETREF(self->prefix, prefix);
    Py_XSETREF(self->suffix, suffix);
    Py_XSETREF(self->added, added);
    self->lowercase = lowercase;
    self->budget = budget;
    self->max_rows = max_rows;
    self->max_chars = max_chars;
    return 0;
}

static void Scanner_dealloc(Scanner *self)
{
    Py_XDECREF(self->cache);
    Py_XDECREF(self->prefix);
    Py_XDECREF(self->suffix);
    Py_XDECREF(self->added);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_O,
     "scan(body) -> list of each text's token ids, or None: leave this body to the Python path."},
    {"request", (PyCFunction)(void (*)(void))Scanner_request, METH_FASTCALL,
     "request(data, paths, max_body) -> (path index, rows) for one whole common request, or None: leave the "
     "bytes to the HTTP parser."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_text_scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The common TEXT request's body to token ids, through a shared word cache.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

typedef struct {
    PyObject_HEAD
    PyObject *name;   /* bytes: the model's name as JSON */
    PyObject *labels; /* tuple of bytes: each label as JSON */
    Py_ssize_t longest_label;
} Replier;

static int is_float32(const Py_buffer *view)
{
    const char *f = view->format;
    if (f != NULL && (*f == '<' || *f == '=' || *f == '@'))
        f++;
    return view->itemsize == 4 && f != NULL && strcmp(f, "f") == 0;
}

static PyObject *Replier_json(Replier *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear(); /* not a contiguous buffer: the Python code writes it */
        Py_RETURN_NONE;
    }
    Py_ssize_t width = PyTuple_GET_SIZE(self->labels);
    if (view.ndim != 2 || !is_float32(&view) || view.shape[0] < 1 || view.shape[1] != width) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    Py_ssize_t rows = view.shape[0];
    const float *values = (const float *)view.buf;
    for (Py_ssize_t i = 0; i < rows * width; i++)
        if (!isfinite(values[i])) { /* json's NaN and Infinity spellings: the Python code's */
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
    /* A float's repr is at most 24 characters; every other piece is bounded by what is counted here. */
    Py_ssize_t room = PyBytes_GET_SIZE(self->name) + 512 + rows * width * 26 + rows * (self->longest_label + 1);
    char *out = PyMem_Malloc(room), *at = out;
    if (out == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    at += sprintf(at, "{\"model_name\":%s,\"model_version\":\"1\",\"outputs\":[{\"name\":\"logits\",\"datatype\":"
                      "\"FP32\",\"shape\":[%zd,%zd],\"data\":[",
                  PyBytes_AS_STRING(self->name), rows, width);
    for (Py_ssize_t i = 0; i < rows * width; i++) {
        /* float.__repr__ of the value as Python reads it (tolist: the float32 widened to a double) */
        char *text = PyOS_double_to_string((double)values[i], 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (text == NULL) {
            PyMem_Free(out);
            PyBuffer_Release(&view);
            return NULL;
        }
        if (i)
            *at++ = ',';
        size_t n = strlen(text);
        memcpy(at, text, n);
        at += n;
        PyMem_Free(text);
    }
    at += sprintf(at, "]},{\"name\":\"label\",\"datatype\":\"BYTES\",\"shape\":[%zd],\"data\":[", rows);
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *row = values + r * width;
        Py_ssize_t best = 0; /* numpy's argmax: the first of equal maxima */
        for (Py_ssize_t k = 1; k < width; k++)
            if (row[k] > row[best])
                best = k;
        PyObject *label = PyTuple_GET_ITEM(self->labels, best);
        if (r)
            *at++ = ',';
        memcpy(at, PyBytes_AS_STRING(label), PyBytes_GET_SIZE(label));
        at += PyBytes_GET_SIZE(label);
    }
    memcpy(at, "]}]}", 4);
    at += 4;
    PyBuffer_Release(&view);
    PyObject *reply = PyBytes_FromStringAndSize(out, at - out);
    PyMem_Free(out);
    return reply;
}

static int Replier_init(Replier *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"name", "labels", NULL};
    PyObject *name, *labels;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$O!O!", keywords, &PyBytes_Type, &name, &PyTuple_Type, &labels))
        return -1;
    if (PyTuple_GET_SIZE(labels) < 1) {
        PyErr_SetString(PyExc_ValueError, "labels must not be empty");
        return -1;
    }
    Py_ssize_t longest = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(labels); i++) {
        PyObject *label = PyTuple_GET_ITEM(labels, i);
        if (!PyBytes_CheckExact(label)) {
            PyErr_SetString(PyExc_TypeError, "labels must hold bytes");
            return -1;
        }
        if (PyBytes_GET_SIZE(label) > longest)
            longest = PyBytes_GET_SIZE(label);
    }
    if (strlen(PyBytes_AS_STRING(name)) != (size_t)PyBytes_GET_SIZE(name)) {
        PyErr_SetString(PyExc_ValueError, "name must not hold a NUL byte");
        return -1;
    }
    Py_INCREF(name);
    Py_INCREF(labels);
    Py_XSETREF(self->name, name);
    Py_XSETREF(self->labels, labels);
    self->longest_label = longest;
    return 0;
}

static void Replier_dealloc(Replier *self)
{
    Py_XDECREF(self->name);
    Py_XDECREF(self->labels);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Replier_methods[] = {
    {"json", (PyCFunction)Replier_json, METH_O,
     "json(logits) -> the plain TEXT request's JSON reply, or None: leave these logits to the Python code."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReplierType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_text_scan.Replier",
    .tp_basicsize = sizeof(Replier),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The JSON reply of a request of one TEXT tensor and nothing else.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Replier_init,
    .tp_dealloc = (destructor)Replier_dealloc,
    .tp_methods = Replier_methods,
};

/* pack(requests, padded, width, pad) -> (ids, mask): a batch of pre-tokenized requests (each a list of rows,
 * each row a list of at most ``width`` ids, as Scanner.scan and AsciiWordPiece.encode give them) as the model's
 * two int64 [padded, width] inputs, row-major in bytearrays: each row's ids then ``pad``, its mask 1 over its
 * ids; the rows past the requests' (up to ``padded``) all ``pad``, attending to their first token only, so
 * softmax stays finite (runner.ModelRunner.stack's layout). In numpy, each row's list took two conversions,
 * about 30 us a batch of 16 on the inference thread, between the batch's last request and the model's start. */
static PyObject *pack(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t padded, width;
    long long pad;
    if (nargs != 4 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "pack(requests: list of lists of rows, padded: int, width: int, pad: int)");
        return NULL;
    }
    if ((padded = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred())
        return NULL;
    if ((width = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred())
        return NULL;
    if ((pad = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred())
        return NULL;
    if (padded < 1 || width < 1 || padded > PY_SSIZE_T_MAX / width / (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "padded and width must be at least 1");
        return NULL;
    }
    Py_ssize_t bytes = padded * width * (Py_ssize_t)sizeof(int64_t);
    PyObject *ids = PyByteArray_FromStringAndSize(NULL, bytes);
    PyObject *mask = PyByteArray_FromStringAndSize(NULL, bytes);
    if (ids == NULL || mask == NULL)
        goto error;
    int64_t *id = (int64_t *)PyByteArray_AS_STRING(ids), *attend = (int64_t *)PyByteArray_AS_STRING(mask);
    Py_ssize_t row = 0;
    PyObject *requests = args[0];
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(requests); r++) {
        PyObject *rows = PyList_GET_ITEM(requests, r);
        if (!PyList_Check(rows)) {
            PyErr_SetString(PyExc_TypeError, "pack: each request must be a list of rows");
            goto error;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(rows); k++, row++) {
            PyObject *tokens = PyList_GET_ITEM(rows, k);
            if (!PyList_Check(tokens)) {
                PyErr_SetString(PyExc_TypeError, "pack: each row must be a list of ids");
                goto error;
            }
            Py_ssize_t n = PyList_GET_SIZE(tokens);
            if (row >= padded || n > width) {
                PyErr_Format(PyExc_ValueError, "pack: %s", row >= padded ? "more rows than padded" : "a row longer than width");
                goto error;
            }
            int64_t *out = id + row * width, *on = attend + row * width;
            for (Py_ssize_t t = 0; t < n; t++) {
                long long value = PyLong_AsLongLong(PyList_GET_ITEM(tokens, t));
                if (value == -1 && PyErr_Occurred())
                    goto error;
                out[t] = value;
                on[t] = 1;
            }
            for (Py_ssize_t t = n; t < width; t++) {
                out[t] = pad;
                on[t] = 0;
            }
        }
    }
    for (; row < padded; row++) {
        int64_t *out = id + row * width, *on = attend + row * width;
        for (Py_ssize_t t = 0; t < width; t++) {
            out[t] = pad;
            on[t] = t == 0;
        }
    }
    return Py_BuildValue("(NN)", ids, mask);
error:
    Py_XDECREF(ids);
    Py_XDECREF(mask);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL,
     "pack(requests, padded, width, pad) -> (ids, mask): pre-tokenized rows as the model's padded int64 inputs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_text_scan", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__text_scan(void)
{
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&ReplierType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0 ||
        PyModule_AddObjectRef(m, "Replier", (PyObject *)&ReplierType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
