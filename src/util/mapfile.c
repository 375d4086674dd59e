#include "util/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int wk_mapfile_open(wk_mapfile *mf, const char *path, wk_error *err)
{
    memset(mf, 0, sizeof *mf);
    mf->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return wk_fail(err, WK_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return wk_fail(err, WK_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return wk_fail(err, WK_EINVAL, "%s: not a regular file", path);
    }
    mf->fd = fd;
    mf->size = (size_t)st.st_size;
    if (mf->size == 0) return WK_OK;
    void *p = mmap(NULL, mf->size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        mf->fd = -1;
        return wk_fail(err, WK_EIO, "%s: cannot mmap %zu bytes: %s", path, mf->size, strerror(e));
    }
    mf->data = p;
    return WK_OK;
}

void wk_mapfile_close(wk_mapfile *mf)
{
    if (mf->data) munmap((void *)mf->data, mf->size);
    if (mf->fd >= 0) close(mf->fd);
    mf->data = NULL;
    mf->size = 0;
    mf->fd = -1;
}

void wk_mapfile_drop(const void *p, size_t n)
{
    if (!p || n == 0) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(page - 1);
    uintptr_t e = ((uintptr_t)p + n + page - 1) & ~(page - 1);
    (void)madvise((void *)a, e - a, MADV_DONTNEED); /* advisory: a failure only leaves pages resident */
}
