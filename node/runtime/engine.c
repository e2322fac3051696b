/* engine.c — one stage of a pipeline run over the mesh.
 *
 * A step: the schedule's forwards and backwards (activations to the next
 * stage, gradients to the previous, labels and the batch's kept-target
 * count travelling with the activations, so only the first stage reads
 * data); the tied embedding's gradient summed between first and last stage;
 * the global gradient norm summed along the chain and sent back; clipping
 * and AdamW everywhere; then the last stage's loss flows back as the commit
 * of the step, which every stage waits for before the next one. Additions
 * happen in the same order as in one process, so the losses match it.
 *
 * Stopping at a step boundary: a stage asked to stop (engine_options'
 * stop_request) sets MESH_COMMIT_STOP on the COMMIT it passes down; the
 * first stage, which starts every step, sees every stage's wish and, instead
 * of starting the next step, ends the run there: it sends "done" (COMMIT
 * with MESH_COMMIT_DONE, step = steps done) to its peers, and each stage,
 * which can only be waiting for the next step's first message, ends the run
 * at that same step. So every stage stops after the same step, saves its
 * state, and a run resumed from those states continues as if never stopped:
 * a step's batches, learning rate and AdamW count are functions of the step
 * alone. */
#include "engine_internal.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


/* Whether this stage has been asked to stop at the next boundary. */
static bool stop_wanted(const engine *e)
{
    return e->stop_request && *e->stop_request;
}


/* The forwards and backwards of one step; the last stage returns the loss
 * sum over kept targets and the count. */
static int run_schedule(engine *e, const sched_op *ops, int nops, double *loss_sum,
                        int64_t *kept_total, char *err, size_t errlen)
{
    const job_spec *j = e->job;
    bool first = e->self == 0, last = e->self == e->p - 1;
    int64_t kept = 0;
    double sum = 0;
    if (first) {
        for (int mb = 0; mb < e->m; mb++) {
            int32_t *ids = e->ids + (size_t)mb * e->rows, *lab = e->labels + (size_t)mb * e->rows;
            data_train_batch(e->data, j->seed, e->step, mb, j->micro_batch, j->batch, ids, lab);
            for (int i = 0; i < e->rows; i++) kept += lab[i] != KERNELS_IGNORE_INDEX;
        }
        if (kept == 0) {
            snprintf(err, errlen, "step %ld: every target of the batch is masked (-100)",
                     e->step + 1);
            return -1;
        }
    }
    for (int k = 0; k < nops; k++) {
        int mb = ops[k].micro, slot = mb % e->nslots;
        int32_t *lab = e->labels + (size_t)mb * e->rows;
        mesh_msg msg;
        mesh_frame *f = NULL;
        if (ops[k].kind == SCHED_FORWARD) {
            const float *in = NULL;
            if (!first) {
                int rc = engine_await(e, MESH_MSG_ACTIVATIONS, mb, -1, &msg, &f, err, errlen);
                if (rc) return rc; /* 1: the run ended before this step */
                if (msg.nlabels != (size_t)e->rows || engine_take_tensor(e, &msg, err, errlen)) {
                    if (msg.nlabels != (size_t)e->rows)
                        snprintf(err, errlen, "step %ld: activations carry %zu labels, expected %d",
                                 e->step + 1, msg.nlabels, e->rows);
                    mesh_frame_free(f);
                    return -1;
                }
                /* the loss is divided by it: a count of this batch's targets */
                if (msg.kept < 1 || msg.kept > (int64_t)e->rows * e->m) {
                    snprintf(err, errlen, "step %ld: %s sent activations with kept = %lld; the "
                             "batch has 1 to %lld targets", e->step + 1,
                             mesh_net_peer_name(e->net, e->prev), (long long)msg.kept,
                             (long long)e->rows * e->m);
                    mesh_frame_free(f);
                    return -1;
                }
                memcpy(lab, msg.labels, (size_t)e->rows * sizeof *lab);
                kept = msg.kept;
                mesh_frame_free(f);
                in = e->inbuf;
            }
            /* the slot's previous activations may still be on their way out */
            if (!last && mesh_net_flush(e->net, e->next, e->cl->timeout_ms, err, errlen)) return -1;
            double s = 0, t0 = now_s();
            int kk = 0;
            if (stage_forward(e->st, slot, first ? e->ids + (size_t)mb * e->rows : NULL, in, lab,
                              &s, &kk, err, errlen))
                return -1;
            e->compute_s += now_s() - t0;
            sum += s;
            if (!last &&
                engine_send_tensor(e, e->next, MESH_MSG_ACTIVATIONS, mb, stage_output(e->st, slot),
                                   e->wirebuf + (size_t)slot * e->rows * e->cfg->hidden_size, lab,
                                   kept, err, errlen))
                return -1;
        } else {
            const float *dout = NULL;
            if (!last) {
                int rc = engine_await(e, MESH_MSG_GRADIENTS, mb, -1, &msg, &f, err, errlen);
                if (rc) return rc;
                int bad = engine_take_tensor(e, &msg, err, errlen);
                mesh_frame_free(f);
                if (bad) return -1;
                dout = e->inbuf;
            }
            /* the input gradient buffer is shared: the last one must be sent */
            if (!first && mesh_net_flush(e->net, e->prev, e->cl->timeout_ms, err, errlen)) return -1;
            double t0 = now_s();
            stage_backward(e->st, slot, dout, (float)(1.0 / (double)kept));
            e->compute_s += now_s() - t0;
            if (!first && engine_send_tensor(e, e->prev, MESH_MSG_GRADIENTS, mb,
                                             stage_input_grad(e->st), e->gradwire, NULL, 0, err,
                                             errlen))
                return -1;
        }
    }
    *loss_sum = sum;
    *kept_total = kept;
    return 0;
}

/* First and last stage both hold the tied embedding: each sends its
 * gradient and adds the other's (embedding + head, as in one process). */
static int exchange_tied(engine *e, char *err, size_t errlen)
{
    if (e->p == 1) {
        stage_sum_tied_grads(e->st);
        return 0;
    }
    if (e->tied < 0) return 0;
    const stage_param *p = NULL;
    for (int i = 0; i < stage_param_count(e->st); i++)
        if (strcmp(stage_param_at(e->st, i)->name, "model.embed_tokens.weight") == 0)
            p = stage_param_at(e->st, i);
    if (!p) return 0;   /* a frozen embedding (lora): nothing to exchange, on either end */
    /* on a GPU through the host copies (stage_pull / stage_push) */
    if (stage_pull(e->st, err, errlen)) return -1;
    float *g = stage_grads(e->st) + p->offset;
    mesh_msg m = {0}, in;
    mesh_frame *f;
    m.type = MESH_MSG_TIED_GRAD;
    m.run_id = e->run_id;
    m.step = e->step;
    m.stage = e->self;
    m.dtype = MESH_F32;
    m.ndim = 2;
    m.shape[0] = p->shape[0];
    m.shape[1] = p->shape[1];
    m.data = g;
    m.nbytes = p->numel * sizeof(float);
    if (mesh_net_send(e->net, e->tied, &m, err, errlen)) return -1;
    int rc = engine_await(e, MESH_MSG_TIED_GRAD, -1, -1, &in, &f, err, errlen);
    if (rc) return rc;
    if (in.dtype != MESH_F32 || in.nbytes != m.nbytes) {
        snprintf(err, errlen, "step %ld: tied gradient of %zu bytes, expected %zu", e->step + 1,
                 in.nbytes, m.nbytes);
        rc = -1;
    } else if (mesh_net_flush(e->net, e->tied, e->cl->timeout_ms, err, errlen) == 0) {
        const unsigned char *b = in.data;
        for (size_t i = 0; i < p->numel; i++) {
            float x;
            memcpy(&x, b + 4 * i, 4);
            g[i] += x;
        }
        if (stage_push(e->st, err, errlen)) rc = -1;
    } else {
        rc = -1;
    }
    mesh_frame_free(f);
    return rc;
}

/* Sum of squares along the chain, total sent back; same order as one
 * process summing stage by stage. */
static int global_norm(engine *e, double *norm, char *err, size_t errlen)
{
    double sum = 0;
    mesh_msg in;
    mesh_frame *f;
    if (e->self > 0) {
        int rc = engine_await(e, MESH_MSG_NORM, -1, 0, &in, &f, err, errlen);
        if (rc) return rc;
        sum = in.value;
        mesh_frame_free(f);
    }
    sum += stage_grad_sumsq(e->st);
    if (e->self < e->p - 1) {
        if (engine_send_small(e, e->next, MESH_MSG_NORM, sum, 0, err, errlen)) return -1;
        int rc = engine_await(e, MESH_MSG_NORM, -1, 1, &in, &f, err, errlen);
        if (rc) return rc;
        sum = in.value;
        mesh_frame_free(f);
    }
    if (e->self > 0 && engine_send_small(e, e->prev, MESH_MSG_NORM, sum, 1, err, errlen)) return -1;
    *norm = sqrt(sum);
    return 0;
}

/* The last stage's loss flows back to the first: the step is committed.
 * Each stage adds its wish to stop to the COMMIT it passes on, so the first
 * stage learns (*stop) whether any stage wants the run to end here. */
static int commit(engine *e, double *loss, bool *stop, char *err, size_t errlen)
{
    mesh_msg in;
    mesh_frame *f;
    uint32_t flags = stop_wanted(e) ? MESH_COMMIT_STOP : 0;
    if (e->self < e->p - 1) {
        int rc = engine_await(e, MESH_MSG_COMMIT, -1, -1, &in, &f, err, errlen);
        if (rc == 1) /* its optimizer step is taken: a "done" now is a peer's fault */
            snprintf(err, errlen, "a peer ended the run during step %ld, after its optimizer step",
                     e->step + 1);
        if (rc) return -1;
        *loss = in.value;
        flags |= in.flags & MESH_COMMIT_STOP;
        mesh_frame_free(f);
    }
    *stop = flags != 0;
    if (e->self > 0 && engine_send_small(e, e->prev, MESH_MSG_COMMIT, *loss, flags, err, errlen))
        return -1;
    return 0;
}

/* One step. Returns 1, with nothing changed, when a peer ended the run at
 * this step's boundary (only possible before the optimizer step: weights
 * and moments change there alone); *stop is set on the first stage when
 * the run is to end after this step. */
static int engine_step(engine *e, const sched_op *ops, int nops, double lr, double *loss,
                       bool *stop, char *err, size_t errlen)
{
    const job_spec *j = e->job;
    double sum = 0, norm;
    int64_t kept = 0;
    int rc;
    e->compute_s = 0;
    stage_zero_grads(e->st);
    if ((rc = run_schedule(e, ops, nops, &sum, &kept, err, errlen)) != 0 ||
        (rc = exchange_tied(e, err, errlen)) != 0 || (rc = global_norm(e, &norm, err, errlen)) != 0)
        return rc;
    double coef = j->grad_clip > 0 ? j->grad_clip / (norm + 1e-6) : 1.0;
    stage_adamw opt = {(float)lr, (float)j->beta1, (float)j->beta2, (float)j->eps,
                       (float)j->weight_decay};
    double t0 = now_s();
    stage_adamw_step(e->st, &opt, (int)(e->step + 1), coef < 1.0 ? (float)coef : 1.0f);
    e->compute_s += now_s() - t0;
    *loss = e->self == e->p - 1 ? sum / (double)kept : 0;
    return commit(e, loss, stop, err, errlen);
}

/* The end of the run after `done` steps (the job's last, or a boundary a
 * stage asked for): every node tells each peer it is done and waits for
 * theirs (a "done" already received counts), so no node closes a
 * connection another still waits on. */
static int finish(engine *e, long done, char *err, size_t errlen)
{
    int peers[3] = {e->prev, e->next, e->tied}, nwait = 0;
    e->step = done; /* "done" carries the number of steps done */
    for (int i = 0; i < 3; i++) {
        if (peers[i] < 0 || (i == 2 && (peers[2] == e->prev || peers[2] == e->next))) continue;
        if (engine_send_small(e, peers[i], MESH_MSG_COMMIT, 0, MESH_COMMIT_DONE, err, errlen))
            return -1;
        if (!(peers[i] < 8 && e->peer_done[peers[i]])) nwait++;
    }
    for (int i = 0; i < nwait; i++) {
        mesh_msg in;
        mesh_frame *f;
        int from;
        if (engine_await_from(e, MESH_MSG_COMMIT, -1, MESH_COMMIT_DONE, &in, &f, &from, err,
                              errlen))
            return -1;
        if (from >= 0 && from < 8) e->peer_done[from] = true;
        mesh_frame_free(f);
    }
    /* Our "done" must leave before we close. A peer may close as soon as it
     * has every "done", ours included, so a flush failing because the peer
     * is gone means it had everything: not an error. */
    for (int i = 0; i < 3; i++) {
        char ignore[256];
        if (peers[i] >= 0) mesh_net_flush(e->net, peers[i], e->cl->timeout_ms, ignore, sizeof ignore);
    }
    return 0;
}

static int save_stage(engine *e, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/stage-%s.safetensors", e->job->out_dir,
             e->cl->nodes[e->self].name);
    chain c = {0};
    c.cfg = *e->cfg;
    c.plan.nstages = 1;
    c.stages[0] = e->st;
    if (stage_pull(e->st, err, errlen)) return -1;
    return checkpoint_export(path, &c, err, errlen);
}


/* The stage as a one-stage chain, for checkpoint.c. */
static chain one_stage(engine *e)
{
    chain c = {0};
    c.cfg = *e->cfg;
    c.plan.nstages = 1;
    c.stages[0] = e->st;
    return c;
}

/* The stage's state after `done` steps (weights, both AdamW moments, the
 * step, the job) into path; resumed from with engine_options.resume. */
static int save_state(engine *e, const char *path, long done, char *err, size_t errlen)
{
    chain c = one_stage(e);
    if (stage_pull(e->st, err, errlen)) return -1;
    return checkpoint_save(path, &c, done, e->job->text, err, errlen);
}

bool snapshot_superseded(const long *steps, int n, long step, long h, long ckpt_every)
{
    int newer = 0;
    long newest_ckpt = -1;
    for (int i = 0; i < n; i++) {
        if (steps[i] > step && (h <= 0 || steps[i] % h == 0)) newer++;
        if (ckpt_every > 0 && steps[i] % ckpt_every == 0 && steps[i] > newest_ckpt)
            newest_ckpt = steps[i];
    }
    return newer >= 2 && step != newest_ckpt;
}

/* DIR/L<b>-<e>-s<step>.safetensors: the stage's snapshot after `done`
 * steps; older snapshots of the same layers go when superseded
 * (snapshot_superseded: two newer at multiples of the interval h). */
static int snapshot(engine *e, const char *dir, long done, long h, long ckpt_every, char *err,
                    size_t errlen)
{
    const cluster_node *me = &e->cl->nodes[e->self];
    char path[4200], prefix[64];
    snprintf(prefix, sizeof prefix, "L%d-%d-s", me->begin, me->end);
    snprintf(path, sizeof path, "%s/%s%ld.safetensors", dir, prefix, done);
    if (save_state(e, path, done, err, errlen)) return -1;
    DIR *d = opendir(dir);
    if (!d) return 0;
    long steps[256];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 256) {
        char *end = NULL;
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0) continue;
        long st = strtol(de->d_name + strlen(prefix), &end, 10);
        if (end && strcmp(end, ".safetensors") == 0) steps[n++] = st;
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        if (steps[i] == done || !snapshot_superseded(steps, n, steps[i], h, ckpt_every)) continue;
        snprintf(path, sizeof path, "%s/%s%ld.safetensors", dir, prefix, steps[i]);
        unlink(path);
    }
    return 0;
}

/* A pool stage stopped at a step boundary (a planned switch hands its
 * layers over from here, docs/ARCHITECTURE.md "Planned switches"): its
 * state as the snapshot of that step, unless the interval wrote it. */
static int stop_snapshot(engine *e, const engine_options *opt, long done, long h, char *err,
                         size_t errlen)
{
    const cluster_node *me = &e->cl->nodes[e->self];
    char path[4200];
    snprintf(path, sizeof path, "%s/L%d-%d-s%ld.safetensors", opt->snapshot_dir, me->begin,
             me->end, done);
    if (done < 1 || access(path, F_OK) == 0) return 0;
    return snapshot(e, opt->snapshot_dir, done, h, opt->checkpoint_every, err, errlen);
}

/* Before the step that completes `done`: when done is a multiple of the
 * snapshot interval h and this run wrote the snapshot of done - h, wait
 * until another member holds a copy of it (opt->wait_copies). */
static void wait_copied(engine *e, const engine_options *opt, long h, long done, long start)
{
    if (!opt->snapshot_dir || !opt->wait_copies || h <= 0 || done % h != 0 || done - h <= start)
        return;
    const cluster_node *me = &e->cl->nodes[e->self];
    char path[4200];
    snprintf(path, sizeof path, "%s/copied-L%d-%d", opt->snapshot_dir, me->begin, me->end);
    long want = done - h;
    double t0 = now_s();
    for (;;) {
        char text[32] = "";
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(text, sizeof text, f)) text[0] = 0;
            fclose(f);
        }
        if (strncmp(text, "none", 4) == 0) return;   /* no member can keep a copy */
        char *end = NULL;
        long long have = strtoll(text, &end, 10);
        if (end != text && have >= want) break;
        if (e->stop_request && *e->stop_request) return;
        if (1e3 * (now_s() - t0) >= ENGINE_COPY_WAIT_MS) {
            printf("train: node %s: no other member holds the snapshot of step %ld after "
                   "%.0f s; going on (a loss now may redo more than snapshot_every steps)\n",
                   me->name, want, ENGINE_COPY_WAIT_MS / 1e3);
            fflush(stdout);
            return;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    double waited = now_s() - t0;
    if (waited >= 0.5) {
        printf("train: node %s waited %.1f s for a copy of step %ld before step %ld\n",
               me->name, waited, want, done);
        fflush(stdout);
    }
}

int engine_train(const job_spec *job, const llama_config *cfg, data_set *data,
                 const cluster_spec *cl, int self, engine_options *opt, FILE *metrics, char *err,
                 size_t errlen)
{
    long stop = opt->stop, start = 0;
    opt->stopped_at = -1;
    engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    e->job = job;
    e->cfg = cfg;
    e->cl = cl;
    e->self = self;
    e->data = data;
    e->done_at = -1;
    e->stop_request = opt->stop_request;
    e->dev = opt->device;
    int rc = -1;
    sched_op *ops = NULL;
    if (engine_open(e, err, errlen)) goto out;
    /* a frozen base is not in the checkpoint: loaded first */
    bool resuming = opt->resume || opt->nresume_files > 0;
    if ((!resuming || job->has_lora) && job_init_stage(job, cfg, e->st, err, errlen))
        goto out;
    if (resuming) {
        chain c = one_stage(e);
        const char *one[1] = {opt->resume};
        if (checkpoint_load_files(opt->resume ? one : opt->resume_files,
                                  opt->resume ? 1 : opt->nresume_files, &c, job, &start, err,
                                  errlen))
            goto out;
        if (start >= stop) {
            snprintf(err, errlen, "%s: holds %ld steps done; nothing to run up to step %ld",
                     opt->resume, start, stop);
            goto out;
        }
    }
    if (stage_push(e->st, err, errlen)) goto out; /* what was written to the host copies */
    ops = malloc((size_t)2 * e->m * sizeof *ops);
    if (!ops) goto out;
    int nops = sched_build(cl->policy, e->p, self, e->m, ops);
    const cluster_node *me = &cl->nodes[self];
    printf("train: node %s, stage %d of %d: layers [%d, %d)%s%s, %d micro-batches of %d, %s, "
           "%d in flight%s\n",
           me->name, self + 1, e->p, me->begin, me->end, self == 0 ? " + embedding" : "",
           self == e->p - 1 ? " + head" : "", e->m, job->micro_batch,
           cl->policy == SCHED_GPIPE ? "GPipe" : "1F1B", e->nslots,
           start ? " (resumed)" : "");
    if (start) printf("train: node %s resumes after step %ld from %s\n", me->name, start,
                      opt->resume ? opt->resume : "snapshots");
    fflush(stdout);
    double t0 = now_s(), tlast = t0;
    long done = start, every = job_snapshot_interval(opt->snapshot_every);
    /* the stage's scratch holds this many threads: a running stage may go
     * down to 1 and back up to it (opt->threads_request) */
    int max_threads = kernels_threads(), threads = max_threads;
    for (e->step = start; e->step < stop; e->step++) {
        /* a step's time runs from the previous step's line: the snapshot or
         * checkpoint written after it, and a wait for a copy, count too */
        double ts = tlast, lr = job_lr(job, e->step), loss = 0;
        int want = opt->threads_request ? (int)*opt->threads_request : 0;
        if (want > 0 && (want < max_threads ? want : max_threads) != threads) {
            threads = want < max_threads ? want : max_threads;
            kernels_set_threads(threads);
            printf("train: node %s computes with %d thread%s from step %ld%s\n", me->name,
                   threads, threads == 1 ? "" : "s", e->step + 1,
                   want > max_threads ? " (its scratch holds no more until it starts again)" : "");
            fflush(stdout);
        }
        wait_copied(e, opt, every, e->step + 1, start);
        bool stop_here = false;
        int st = engine_step(e, ops, nops, lr, &loss, &stop_here, err, errlen);
        if (st == 1) break; /* the first stage ended the run before this step */
        if (st) {
            engine_abort(e, err);
            goto out;
        }
        done = e->step + 1;
        tlast = now_s();
        double ms = 1e3 * (tlast - ts);
        if (metrics) {
            /* "time": the wall clock at the step's end, so that the steps of
             * two stages, or of two plans around a switch, can be lined up */
            struct timespec wall;
            clock_gettime(CLOCK_REALTIME, &wall);
            fprintf(metrics, "{\"step\": %ld, \"loss\": %.17g, \"lr\": %.6g, \"tokens\": %ld, "
                    "\"step_ms\": %.1f, \"compute_ms\": %.1f, \"threads\": %d, "
                    "\"tokens_per_s\": %.1f, \"time\": %.3f}\n", done, loss, lr,
                    done * (long)job->batch * job->seq_len, ms, 1e3 * e->compute_s, threads,
                    (double)job->batch * job->seq_len / ms * 1e3,
                    (double)wall.tv_sec + 1e-9 * (double)wall.tv_nsec);
            fflush(metrics);
        }
        if (done % job->log_interval == 0 || done == stop) {
            printf("step %ld/%ld  loss %.4f  lr %.2e  %.0f tok/s\n", done, job->steps, loss, lr,
                   (double)(done - start) * job->batch * job->seq_len / (now_s() - t0));
            fflush(stdout);
        }
        if (opt->checkpoint && job->checkpoint_interval && done % job->checkpoint_interval == 0 &&
            done < stop && save_state(e, opt->checkpoint, done, err, errlen)) {
            engine_abort(e, err);
            goto out;
        }
        bool snap_step = (every > 0 && done % every == 0) ||
                         (opt->checkpoint_every > 0 && done % opt->checkpoint_every == 0);
        if (opt->snapshot_dir && snap_step && done < stop &&
            snapshot(e, opt->snapshot_dir, done, every, opt->checkpoint_every, err, errlen)) {
            engine_abort(e, err);
            goto out;
        }
        if (self == 0 && stop_here && done < stop) break; /* a stage asked to stop here */
    }
    if (e->done_at >= 0) done = e->done_at;
    if (done < job->steps) {
        /* stopped before the job's end: the state to resume from */
        if ((opt->checkpoint && save_state(e, opt->checkpoint, done, err, errlen)) ||
            save_stage(e, err, errlen) ||
            (opt->snapshot_dir && stop_snapshot(e, opt, done, every, err, errlen))) {
            engine_abort(e, err);
            goto out;
        }
        if (finish(e, done, err, errlen)) goto out;
        printf("train: node %s stopped after step %ld of %ld%s%s\n", me->name, done, job->steps,
               opt->checkpoint ? "; state in " : "", opt->checkpoint ? opt->checkpoint : "");
    } else {
        if (save_stage(e, err, errlen) || finish(e, done, err, errlen)) goto out;
        printf("train: node %s wrote %s/stage-%s.safetensors\n", me->name, job->out_dir,
               me->name);
    }
    opt->stopped_at = done;
    rc = 0;
out:
    free(ops);
    engine_close(e);
    free(e);
    return rc;
}
