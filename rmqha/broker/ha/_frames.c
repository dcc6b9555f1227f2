/* The zero-copy slave's frame loop in C (rmqha/broker/ha/frames.py says when it is used).
 *
 * SlaveSession.drain reads each 12-byte HA frame header (fromPhyOffset int64, size int32, big-endian)
 * from the pipe that holds the socket's bytes and has the frame's body spliced on into the commit-log
 * file. In Python that is ~5 us per 32 KiB frame beside the kernel's copy; here it is two system calls.
 *
 * splice_frames() takes only the common case and hands everything else back:
 *   - it first finishes the body in progress (body_left > 0), if any;
 *   - then, while the pipe holds a whole header, it reads it and takes the frame only if it carries a
 *     body (size in 1..max_body) that continues the log exactly (offset == next) and fits in the file
 *     (offset + size <= file_end). Anything else (a heartbeat, a gap, a frame for the next file, a
 *     bad size or offset) stops the loop, and the header it read is returned for Python to judge;
 *   - it stops at the first failed system call and returns its errno, with the state as it is then.
 * It never decides an error itself: the caller raises the same errors the Python loop raises.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#define HEADER_SIZE 12

static int64_t be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

PyDoc_STRVAR(splice_frames_doc,
"splice_frames(pipe_fd, available, file_fd, pos, body_left, body_size, next, file_end, max_body)\n"
"-> (available, pos, body_left, body_size, next, consumed, completed, first_start, header, err)\n\n"
"Finish the body in progress, then take whole frames that continue the log at `next` inside the file\n"
"(log offsets below `file_end`), splicing their bodies from the pipe into file_fd at `pos`.\n"
"consumed: bytes taken from the pipe; completed: body bytes of frames finished here, the first of\n"
"which starts at log offset first_start (-1 if none); header: the 12 bytes of a header read and not\n"
"taken (None if none); err: 0, an errno, or -1 when a splice moved nothing.");

static PyObject *splice_frames(PyObject *self, PyObject *args)
{
    (void)self;
    int pipe_fd, file_fd;
    long long available, pos, body_left, body_size, next, file_end, max_body;
    if (!PyArg_ParseTuple(args, "iLiLLLLLL", &pipe_fd, &available, &file_fd, &pos, &body_left, &body_size,
                          &next, &file_end, &max_body))
        return NULL;
    if (available < 0 || pos < 0 || body_left < 0 || body_size < body_left || max_body < 0) {
        PyErr_SetString(PyExc_ValueError, "splice_frames: negative or inconsistent state");
        return NULL;
    }
    long long consumed = 0, completed = 0, first_start = -1;
    unsigned char header[HEADER_SIZE];
    int have_header = 0, err = 0;

    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        if (body_left > 0) {
            if (available == 0)
                break;
            loff_t off = (loff_t)pos;
            size_t want = (size_t)(body_left < available ? body_left : available);
            ssize_t moved = splice(pipe_fd, NULL, file_fd, &off, want, SPLICE_F_MOVE);
            if (moved < 0) {
                if (errno == EINTR)
                    continue;
                err = errno;
                break;
            }
            if (moved == 0) {
                err = -1;
                break;
            }
            pos += moved;
            available -= moved;
            consumed += moved;
            body_left -= moved;
            if (body_left == 0) {
                if (first_start < 0)
                    first_start = next - body_size;
                completed += body_size;
            }
            continue;
        }
        if (available < HEADER_SIZE)
            break;
        size_t got = 0;
        while (got < HEADER_SIZE) {
            ssize_t n = read(pipe_fd, header + got, HEADER_SIZE - got);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                err = errno;
                break;
            }
            if (n == 0) {
                err = EIO;  /* the pipe said it held more: it cannot end here */
                break;
            }
            got += (size_t)n;
        }
        available -= (long long)got;
        consumed += (long long)got;
        if (err) {
            /* A header cut by a failed read: its bytes are gone, so nothing after it can be trusted;
               the caller closes the connection on the error. */
            break;
        }
        int64_t offset = be64(header);
        int32_t size = be32(header + 8);
        if (size <= 0 || (long long)size > max_body || offset != next || offset > file_end - size) {
            have_header = 1;
            break;
        }
        body_size = body_left = size;
        next = offset + size;
    }
    Py_END_ALLOW_THREADS

    PyObject *hdr;
    if (have_header) {
        hdr = PyBytes_FromStringAndSize((const char *)header, HEADER_SIZE);
        if (hdr == NULL)
            return NULL;
    } else {
        hdr = Py_NewRef(Py_None);
    }
    return Py_BuildValue("LLLLLLLLNi", available, pos, body_left, body_size, next, consumed, completed,
                         first_start, hdr, err);
}

static PyMethodDef methods[] = {
    {"splice_frames", splice_frames, METH_VARARGS, splice_frames_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_frames",
    "The zero-copy slave's frame loop (splice_frames); rmqha/broker/ha/frames.py wraps it.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__frames(void)
{
    return PyModule_Create(&module);
}
