/* Plugs the prefix cache (cache/: slots, checkpoints, archive) into the
 * engine service through its eng_prefix_store table. Lives in server/
 * because engine/ sits below cache/ in the module order. */
#ifndef WICK_SERVER_PREFIX_CACHE_H
#define WICK_SERVER_PREFIX_CACHE_H

#include "cache/cache.h"
#include "engine/service.h"

/* eng_prefix_store_factory: user is a ckpt_cache_config (borrowed; must
 * outlive the service, it is used again on reload). */
int srv_prefix_cache_factory(void *user, struct eng_ctx *ctx, int32_t n_ctx, eng_prefix_store *out, wk_error *err);

/* The cache's kind for a chat boundary (chat_boundary_kind + CHAT_BFLAG_*). */
int srv_ckpt_kind_of_boundary(int chat_kind, unsigned flags);

#endif
