/* autograd.c — the tape: recording nodes, ordering them, running the backward rules.
 *
 * Read autograd.h first; this file follows it section by section. */
#include "autograd/autograd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- grad mode ---- */
static _Thread_local int no_grad_depth;
void fg_no_grad_enter(void) { no_grad_depth++; }
void fg_no_grad_exit(void) {
    if (no_grad_depth > 0) no_grad_depth--;
}
int fg_grad_enabled(void) { return no_grad_depth == 0; }

/* ---- node lifetime ---- */
static atomic_llong nodes_alive;
int64_t fg_nodes_alive(void) { return (int64_t)atomic_load(&nodes_alive); }

/* Drop what a node holds for its backward: inputs, saved tensors, ctx, grad_out. */
static void node_drop_graph(fg_node *n) {
    for (int i = 0; i < n->n_inputs; i++) {
        fg_release(n->inputs[i]);
        n->inputs[i] = NULL;
    }
    for (int i = 0; i < n->n_saved; i++) {
        fg_release(n->saved[i]);
        n->saved[i] = NULL;
    }
    if (n->ctx && n->ctx_free) n->ctx_free(n->ctx);
    n->ctx = NULL;
    fg_release(n->grad_out);
    n->grad_out = NULL;
    n->freed = 1;
}

void fg_node_retain(fg_node *n) {
    if (n) n->refcount++;
}

/* Releasing a node can release its inputs, whose nodes can then die too: a long chain (a deep
 * model's graph) would recurse once per node. Unwind with an explicit work list instead. */
static _Thread_local fg_node **dying;
static _Thread_local size_t dying_n, dying_cap;
static _Thread_local int dying_active;

void fg_node_release(fg_node *n) {
    if (!n || --n->refcount > 0) return;
    if (dying_n == dying_cap) {
        size_t cap = dying_cap ? dying_cap * 2 : 64;
        fg_node **d = realloc(dying, cap * sizeof *d);
        FG_ASSERT(d != NULL, "out of memory while freeing the graph");
        dying = d;
        dying_cap = cap;
    }
    dying[dying_n++] = n;
    if (dying_active) return; /* an outer call drains the list */
    dying_active = 1;
    while (dying_n) {
        fg_node *x = dying[--dying_n];
        node_drop_graph(x);
        free(x);
        atomic_fetch_sub(&nodes_alive, 1);
    }
    dying_active = 0;
    free(dying);
    dying = NULL;
    dying_cap = 0;
}

void fg_autograd_init(void) { fg_set_node_release_hook(fg_node_release); }

/* ---- recording ---- */
fg_status fg_set_requires_grad(fg_tensor *t, int on) {
    if (!t) return fg_error(FG_ERR_ARG, "requires_grad: NULL tensor");
    if (t->grad_fn)
        return fg_error(FG_ERR_ARG, "requires_grad: only leaf tensors can be marked (this one is the output of '%s')",
                        t->grad_fn->op);
    fg_autograd_init();
    t->requires_grad = on ? 1 : 0;
    return FG_OK;
}

/* ---- the op profile ---- */
static struct {
    int on, n;
    pthread_t owner; /* the thread that started it: only its ops count */
    double last; /* the monotonic clock at the last record or mark */
    fg_op_profile_row rows[FG_OP_PROFILE_MAX];
} prof;

static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char overflow[] = "(more ops than rows)";

static fg_op_profile_row *prof_row(const char *name) {
    for (int i = 0; i < prof.n; i++)
        if (prof.rows[i].name == name || !strcmp(prof.rows[i].name, name)) return &prof.rows[i];
    if (prof.n == FG_OP_PROFILE_MAX) return &prof.rows[FG_OP_PROFILE_MAX - 1]; /* the overflow row */
    fg_op_profile_row *r = &prof.rows[prof.n++];
    memset(r, 0, sizeof *r);
    /* the last row takes every op past the table, under its own name */
    r->name = prof.n == FG_OP_PROFILE_MAX ? overflow : name;
    return r;
}

static void prof_charge_fwd(const char *name) {
    const double t = prof_now();
    fg_op_profile_row *r = prof_row(name);
    r->fwd_s += t - prof.last;
    r->fwd_n++;
    prof.last = t;
}

/* on, and on the thread that started it */
static int prof_here(void) { return prof.on && pthread_equal(prof.owner, pthread_self()); }

void fg_op_profile_start(void) {
    prof.n = 0;
    prof.owner = pthread_self();
    prof.on = 1;
    prof.last = prof_now();
}
void fg_op_profile_stop(void) { prof.on = 0; }
void fg_op_profile_mark(void) {
    if (prof_here()) prof.last = prof_now();
}
void fg_op_profile_phase(const char *name) {
    if (prof_here()) prof_charge_fwd(name);
}
int fg_op_profile_read(fg_op_profile_row *rows, int max) {
    for (int i = 0; i < prof.n && i < max; i++) rows[i] = prof.rows[i];
    return prof.n;
}

fg_node *fg_record(fg_tensor *out, const char *op, fg_backward_fn backward, int n_inputs, fg_tensor *const *inputs) {
    if (!fg_grad_enabled()) return NULL;
    if (prof_here()) prof_charge_fwd(op);
    FG_ASSERT(n_inputs >= 0 && n_inputs <= FG_MAX_INPUTS, "too many inputs for one node");
    int any = 0;
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] && inputs[i]->requires_grad) any = 1;
    if (!any) return NULL;
    fg_node *n = calloc(1, sizeof *n);
    FG_ASSERT(n != NULL, "out of memory while recording the graph");
    fg_autograd_init();
    atomic_fetch_add(&nodes_alive, 1);
    n->op = op;
    n->backward = backward;
    n->n_inputs = n_inputs;
    for (int i = 0; i < n_inputs; i++) n->inputs[i] = fg_retain(inputs[i]);
    n->out_ndim = out->ndim;
    memcpy(n->out_shape, out->shape, sizeof n->out_shape);
    n->out_dtype = out->dtype;
    n->out_device = out->device;
    n->refcount = 1;
    FG_ASSERT(out->grad_fn == NULL, "an op output already has a node");
    out->grad_fn = n; /* out owns the reference */
    out->requires_grad = 1;
    return n;
}

int fg_node_save(fg_node *n, fg_tensor *t) {
    FG_ASSERT(n->n_saved < FG_MAX_SAVED, "too many saved tensors for one node");
    n->saved[n->n_saved] = fg_retain(t);
    return n->n_saved++;
}

void *fg_node_state(fg_node *n, size_t size) {
    FG_ASSERT(size <= FG_NODE_STATE_BYTES, "an op's state struct is larger than FG_NODE_STATE_BYTES");
    return n->state.bytes;
}

fg_tensor *fg_node_keep(fg_node *n, fg_tensor *t) {
    if (!t) return NULL;
    fg_node_save(n, t);
    return t;
}

/* ---- gradient buffers ---- */
/* t's gradient buffer, made (zeroed, or left unset when `unset`) if there is none yet; *made says
 * whether this call made it. */
static fg_status grad_slot(fg_tensor *t, fg_tensor **g, int unset, int *made) {
    *g = NULL;
    *made = 0;
    if (!t || !t->requires_grad) return FG_OK;
    fg_tensor **slot;
    if (t->grad_fn) {
        if (t->grad_fn->freed) return FG_OK; /* its part of the graph is gone */
        slot = &t->grad_fn->grad_out;
    } else {
        slot = &t->grad;
    }
    if (!*slot) {
        *slot = unset ? fg_empty(t->dtype, t->device, t->ndim, t->shape)
                      : fg_zeros(t->dtype, t->device, t->ndim, t->shape);
        if (!*slot) return fg_last_status();
        *made = 1;
    }
    *g = *slot;
    return FG_OK;
}

fg_status fg_grad_get(fg_tensor *t, fg_tensor **g) {
    int made;
    return grad_slot(t, g, 0, &made);
}

fg_status fg_grad_get_fresh(fg_tensor *t, fg_tensor **g, int *fresh) { return grad_slot(t, g, 1, fresh); }

fg_status fg_grad_take_output_grad(fg_node *n, fg_tensor *t, int *taken) {
    *taken = 0;
    fg_tensor *g = n->grad_out;
    if (!t || !t->requires_grad || !t->grad_fn || t->grad_fn->freed || t->grad_fn->grad_out || !g) return FG_OK;
    if (!fg_same_shape(t, g) || t->dtype != g->dtype || t->device != g->device || !fg_is_contiguous(g)) return FG_OK;
    t->grad_fn->grad_out = fg_retain(g);
    *taken = 1;
    return FG_OK;
}

fg_tensor *fg_grad_buffer(fg_tensor *t) {
    fg_tensor *g;
    fg_grad_get(t, &g);
    return g;
}

fg_status fg_set_grad_storage(fg_tensor *leaf, fg_tensor *storage) {
    char b1[96], b2[96];
    if (!leaf || !storage) return fg_error(FG_ERR_ARG, "grad storage: NULL tensor");
    if (leaf->grad_fn)
        return fg_error(FG_ERR_ARG, "grad storage: only a leaf keeps its gradient (this is the output of '%s')",
                        leaf->grad_fn->op);
    if (!fg_same_shape(leaf, storage) || leaf->dtype != storage->dtype || leaf->device != storage->device ||
        !fg_is_contiguous(storage))
        return fg_error(FG_ERR_SHAPE,
                        "grad storage: %s must be a contiguous tensor of the leaf's shape %s, dtype and device",
                        fg_shape_str(storage, b1, sizeof b1), fg_shape_str(leaf, b2, sizeof b2));
    fg_retain(storage);
    fg_release(leaf->grad);
    leaf->grad = storage;
    return FG_OK;
}

fg_status fg_accumulate_grad(fg_tensor *t, const fg_tensor *g) {
    if (!t || !t->requires_grad) return FG_OK;
    if (t->grad_fn && t->grad_fn->freed) return FG_OK; /* that part of the graph is gone */
    fg_tensor *buf = fg_grad_buffer(t);
    if (!buf) return fg_last_status(); /* the zeros could not be allocated */
    return fg_axpy(buf, 1.0, g);
}

void fg_zero_grad(fg_tensor *t) {
    if (t && t->grad) fg_fill(t->grad, 0.0);
}

/* ---- backward ---- */
static _Atomic uint64_t visit_epoch;

/* Reverse topological order of the nodes reachable from `root`: iterative post-order DFS.
 * Returns a malloc'd array (caller frees) of *count nodes, inputs before the nodes that use them,
 * or NULL (with fg_error) when out of memory. */
static fg_node **topo_order(fg_node *root, size_t *count) {
    uint64_t epoch = atomic_fetch_add(&visit_epoch, 1) + 1;
    size_t cap = 64, n = 0, scap = 64, sn = 0;
    fg_node **order = malloc(cap * sizeof *order);
    struct frame {
        fg_node *node;
        int next;
    } *stack = malloc(scap * sizeof *stack);
    if (!order || !stack) goto oom;
    root->visit = epoch;
    stack[sn++] = (struct frame){root, 0};
    while (sn) {
        struct frame *f = &stack[sn - 1];
        if (f->next < f->node->n_inputs) {
            fg_tensor *in = f->node->inputs[f->next++];
            fg_node *child = in ? in->grad_fn : NULL;
            if (child && child->visit != epoch && !child->freed) {
                child->visit = epoch;
                if (sn == scap) {
                    void *ns = realloc(stack, 2 * scap * sizeof *stack);
                    if (!ns) goto oom;
                    stack = ns;
                    scap *= 2;
                }
                stack[sn++] = (struct frame){child, 0};
            }
        } else {
            if (n == cap) {
                void *no = realloc(order, 2 * cap * sizeof *order);
                if (!no) goto oom;
                order = no;
                cap *= 2;
            }
            order[n++] = f->node;
            sn--;
        }
    }
    free(stack);
    *count = n;
    return order;
oom:
    free(stack);
    free(order);
    fg_error(FG_ERR_OOM, "backward: out of memory while ordering the graph");
    return NULL;
}

fg_status fg_backward(fg_tensor *root, const fg_tensor *grad_root) {
    char b1[96], b2[96];
    if (!root) return fg_error(FG_ERR_ARG, "backward: NULL tensor");
    if (!root->requires_grad)
        return fg_error(FG_ERR_STATE, "backward: the tensor does not require grad (no input of its graph does)");
    if (!grad_root && fg_numel(root) != 1)
        return fg_error(FG_ERR_SHAPE, "backward: %s is not a scalar; pass its gradient explicitly",
                        fg_shape_str(root, b1, sizeof b1));
    if (grad_root && !fg_same_shape(root, grad_root))
        return fg_error(FG_ERR_SHAPE, "backward: gradient %s does not match the tensor %s",
                        fg_shape_str(grad_root, b1, sizeof b1), fg_shape_str(root, b2, sizeof b2));
    if (root->grad_fn && root->grad_fn->freed)
        return fg_error(FG_ERR_STATE, "backward: the graph through '%s' was already freed by an earlier backward",
                        root->grad_fn->op);

    /* Seed: d root / d root = 1 (or the given gradient). A leaf root just accumulates. */
    fg_tensor *seed = grad_root ? fg_clone(grad_root) : fg_ones(root->dtype, root->device, root->ndim, root->shape);
    if (!seed) return fg_last_status();
    fg_status st = fg_accumulate_grad(root, seed);
    fg_release(seed);
    if (st != FG_OK || !root->grad_fn) return st;

    size_t count;
    fg_node **order = topo_order(root->grad_fn, &count);
    if (!order) return fg_last_status();
    /* Keep every node alive while we walk, even if a rule's release would drop the last ref. */
    for (size_t i = 0; i < count; i++) fg_node_retain(order[i]);
    for (size_t i = count; i-- > 0 && st == FG_OK;) {
        fg_node *n = order[i];
        if (n->grad_out) { /* no gradient reached this node: its rule has nothing to add */
            if (!n->backward)
                st = fg_error(FG_ERR_STATE, "backward: op '%s' has no backward rule", n->op);
            else if (prof_here()) {
                prof_charge_fwd("backward: graph walk");
                st = n->backward(n);
                const double t = prof_now();
                fg_op_profile_row *r = prof_row(n->op);
                r->bwd_s += t - prof.last;
                r->bwd_n++;
                prof.last = t;
            } else
                st = n->backward(n);
        }
        node_drop_graph(n); /* inputs, saved tensors, grad_out: no longer needed */
    }
    if (prof_here()) prof_charge_fwd("backward: graph walk");
    for (size_t i = 0; i < count; i++) {
        if (st != FG_OK) node_drop_graph(order[i]);
        fg_node_release(order[i]);
    }
    free(order);
    return st;
}
