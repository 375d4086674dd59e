#include "gguf/gguf_aux.h"

#include <stdio.h>
#include <string.h>

static int str_key(const gguf_file *f, const char *key, char *buf, size_t cap)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_T_STRING) return 0;
    snprintf(buf, cap, "%.*s", (int)(kv->v.str.len < cap ? kv->v.str.len : cap - 1), kv->v.str.ptr);
    return 1;
}

int gguf_aux_open(gguf_aux *out, const char *path, wk_error *err)
{
    memset(out, 0, sizeof *out);
    gguf_file *f = NULL;
    int rc = gguf_open(&f, path, err);
    if (rc) return rc;
    char type[32] = "", arch[32] = "";
    str_key(f, "general.type", type, sizeof type);
    bool has_arch = str_key(f, "general.architecture", arch, sizeof arch);
    if (strcmp(type, "aux") && (has_arch || type[0])) {
        gguf_close(f);
        return wk_fail(err, WK_EINVAL, "%s: a %s file (%s%s), not an auxiliary table (general.type \"aux\")", path,
                       type[0] ? type : "model", has_arch ? "architecture " : "general.type ",
                       has_arch ? arch : type);
    }
    out->file = f;
    if (!str_key(f, "aux.kind", out->kind, sizeof out->kind)) snprintf(out->kind, sizeof out->kind, "table");
    for (size_t i = 0; i < gguf_tensor_count(f); i++) out->tensor_bytes += gguf_tensor_at(f, i)->n_bytes;
    out->file_bytes = gguf_file_size(f);
    return WK_OK;
}

void gguf_aux_close(gguf_aux *a)
{
    if (!a) return;
    gguf_close(a->file);
    memset(a, 0, sizeof *a);
}

const gguf_tensor *gguf_aux_tensor(const gguf_aux *a, const char *name)
{
    return a->file ? gguf_find_tensor(a->file, name) : NULL;
}
