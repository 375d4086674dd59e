/* Constrained output for the generate loop: the grammar a request's answer
 * must follow (a call of the offered tools, a JSON object, a JSON value
 * valid against a schema), built from what the server validated, and
 * applied token by token: the logits of tokens the grammar forbids become
 * -inf before the sampler sees them. The vocabulary's token byte strings
 * are prepared once per engine, on first use. */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_tools.h"
#include "pipeline/pipeline_internal.h"

/* Where the answer may start: inside an opened <think> (Qwen3.5's prompt),
 * with an optional one, or straight away. */
static enum gram_reasoning reasoning_of(const pl_request *r)
{
    if (r->popt.reasoning_open) return GRAM_REASONING_OPEN;
    return r->popt.parse_reasoning ? GRAM_REASONING_OPTIONAL : GRAM_REASONING_NONE;
}

int pl_constraint_begin(pl_request *r, pl_constraint *c)
{
    memset(c, 0, sizeof *c);
    const eng_request *req = r->req;
    bool tools = r->chat && req->tools && (req->tool_choice == ENG_TOOLS_REQUIRED || req->tool_choice == ENG_TOOLS_FUNCTION);
    bool json = req->response_format == ENG_FORMAT_JSON_OBJECT || req->response_format == ENG_FORMAT_JSON_SCHEMA;
    if (!tools && !json) return 0;
    pl_engine *pe = r->pe;
    wk_error err = {0};
    if (!pe->vocab) return pl_fail(r, 400, "invalid_request_error", NULL, "constrained output needs the model's tokenizer");
    if (!pe->gvocab && gram_vocab_new(&pe->gvocab, pe->vocab, &err))
        return pl_fail(r, 500, "server_error", NULL, "preparing the vocabulary for constrained output: %.400s", err.msg);
    int rc;
    enum gram_reasoning reasoning = reasoning_of(r);
    if (tools) {
        if (r->popt.tool_format == CHAT_TOOLS_NONE)
            return pl_fail(r, 400, "invalid_request_error", NULL,
                           "tool_choice asks for a tool call, but this model's chat template has no tool-call format");
        rc = gram_for_tools(&c->g, req->tools, r->popt.tool_format,
                            req->tool_choice == ENG_TOOLS_FUNCTION ? req->tool_choice_name : NULL,
                            req->parallel_tool_calls, reasoning, &err);
    } else if (req->response_format == ENG_FORMAT_JSON_SCHEMA) {
        rc = gram_from_json_schema(&c->g, req->json_schema, reasoning, &err);
    } else {
        rc = gram_json_object(&c->g, reasoning, &err);
    }
    if (!rc) rc = gram_state_new(&c->s, c->g, pe->gvocab, &err);
    if (rc) {
        pl_constraint_free(c);
        return rc == WK_ENOMEM ? pl_fail(r, 500, "server_error", NULL, "out of memory")
                               : pl_fail(r, 400, "invalid_request_error", NULL, "%.480s", err.msg);
    }
    c->masked = malloc(sizeof(float) * (size_t)pe->m->hp.n_vocab);
    if (!c->masked) {
        pl_constraint_free(c);
        return pl_fail(r, 500, "server_error", NULL, "out of memory");
    }
    c->on = true;
    return 0;
}

const float *pl_constraint_mask(pl_constraint *c, const float *logits, int32_t n_vocab, wk_error *err)
{
    memcpy(c->masked, logits, sizeof(float) * (size_t)n_vocab);
    return gram_mask_logits(c->s, c->masked, err) ? NULL : c->masked;
}

int pl_constraint_accept(pl_constraint *c, int32_t token, wk_error *err) { return gram_accept(c->s, token, err); }

bool pl_constraint_done(const pl_constraint *c) { return gram_is_done(c->s); }

/* Budgets this short or shorter are watched for a forced close: a closing
 * path is searched each step from here on (milliseconds each). */
#define FORCE_WINDOW 64
#define FORCE_SLACK 8

int32_t pl_constraint_force(pl_constraint *c, int32_t left, int32_t eog)
{
    if (left > FORCE_WINDOW) return -1;
    /* the last token, or a forced close complete: end here */
    if (gram_can_end(c->s)) return left <= 1 || c->closing ? eog : -1;
    int32_t path[FORCE_WINDOW];
    wk_error err = {0};
    int n = gram_shortest_completion(c->s, path, FORCE_WINDOW, &err);
    /* the closing path and an end token still fit with FORCE_SLACK to spare: take
     * its first token now. The slack is for the sampled token that comes before the
     * next check, which can lengthen the path (a UTF-8 lead byte inside a string
     * adds its continuation bytes, a \u escape its four hex digits). */
    if (n <= 0 || n + 1 + FORCE_SLACK < left) return -1;
    c->closing = true;
    return path[0];
}

void pl_constraint_free(pl_constraint *c)
{
    gram_state_free(c->s);
    gram_grammar_free(c->g);
    free(c->masked);
    memset(c, 0, sizeof *c);
}
