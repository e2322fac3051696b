/* main.c — shardnode's entry point: dispatch to a subcommand. */
#include "commands.h"
#include "daemon.h"

#include "kernels.h"
#include "node_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: shardnode COMMAND [OPTIONS]\n"
            "\n"
            "commands:\n"
            "  gradcheck --config C.json --weights W.safetensors --batch B.safetensors\n"
            "            --out G.safetensors [--split L1,L2,...] [--threads N] [--device D]\n"
            "      loss and the gradient of every parameter for one batch, optionally\n"
            "      cut into a chain of pipeline stages at the given layers (--device:\n"
            "      cpu, cuda:N or hip:N, as `shardnode devices` lists them);\n"
            "      --random B,T,SEED instead of --weights/--batch: seeded weights and tokens\n"
            "  bench --config C.json [--batch B] [--seq T] [--steps K] [--threads N] [--seed S]\n"
            "        [--device D]\n"
            "      time training steps (forward, backward, AdamW) on random tokens;\n"
            "      one JSON line per step\n"
            "  bench --sgemm [--threads N]\n"
            "      this machine's sgemm peak (2048^3) in GFLOP/s\n"
            "  train --job JOB.json [--steps N] [--metrics FILE] [--resume] [--threads N]\n"
            "        [--device D]\n"
            "      train a job on this node; --steps N stops after step N of the job's\n"
            "      schedule, --resume continues from OUT/checkpoint.safetensors, --device\n"
            "      computes on cpu (default), cuda:N or hip:N\n"
            "  train --job JOB.json --cluster CLUSTER.json --node NAME [--steps N] [--metrics F]\n"
            "        [--device D]\n"
            "      run this node's stage of a pipeline described by CLUSTER.json (on D)\n"
            "  train --state DIR --job JOB.json [--wait] | train --state DIR --stop\n"
            "      submit a job to the mesh of the node running on DIR (--wait: follow the\n"
            "      plan and progress to the end); --stop stops the mesh's job everywhere\n"
            "  export --job JOB.json --cluster CLUSTER.json [--out DIR]\n"
            "      merge the stages' stage-NAME.safetensors into one model directory\n"
            "      (a LoRA job: a PEFT adapter directory, adapter_config.json and\n"
            "      adapter_model.safetensors; without --cluster, from a single process)\n"
            "  export --job JOB.json [--cluster CLUSTER.json] --merge [--out DIR]\n"
            "      a LoRA job's adapters merged into its base: a whole HF model directory\n"
            "  export --state DIR [--out DIR]\n"
            "      gather the stages of the mesh's finished job over the mesh and merge them\n"
            "  batches --job JOB.json --out B.safetensors [--steps N]\n"
            "      write the token batches the job trains on (input_ids, labels, val_*)\n"
            "  tokenizer train --input FILE... --vocab-size N --out tokenizer.json\n"
            "  tokenizer encode|decode --tokenizer tokenizer.json   (stdin to stdout)\n"
            "  import --gguf FILE --out DIR | import --hf DIR --check\n"
            "      a GGUF LLaMA (llama.cpp) dequantized into an HF model directory;\n"
            "      --check validates an HF directory and prints its config\n"
            "  generate --model DIR [--adapter DIR] --prompt TEXT [--tokens N] [--temperature T]\n"
            "           [--seed S]\n"
            "      sample from a model directory (with a PEFT LoRA adapter merged at load)\n"
            "  generate --model DIR [--adapter DIR] --logits IDS --out FILE\n"
            "      the logits after each of the token ids 1,2,3,... into FILE (safetensors)\n"
            "  profile --model CONFIG.json [--micro-batch B --seq T] [--json] [--device D]\n"
            "      time the real forward, backward and AdamW per layer on this machine\n"
            "  devices [--json]\n"
            "      what this binary computes on here: the CPU, and each GPU backend's\n"
            "      devices or why it offers none (not built, no runtime, no device)\n"
            "  plan --fleet FLEET.json --model CONFIG.json [--micro-batch B --seq T --batch N]\n"
            "       [--exhaustive] [--json] [--svg FILE]\n"
            "      plan which node holds which layers; compare with a uniform split\n"
            "  link --listen HOST:PORT | --connect HOST:PORT [--rounds N] [--max-size BYTES]\n"
            "      measure a link's latency and bandwidth with echoed probes\n"
            "  init --state DIR --name NAME [--listen-port P] [--endpoint HOST:PORT]\n"
            "       [--prefix CIDR]\n"
            "      make this node's state directory (keys, node.json) and a new mesh\n"
            "  invite --state DIR [--ttl DURATION]\n"
            "      print a single-use invite token to this node's mesh (30m, 24h, 7d)\n"
            "  up --state DIR [--threads N] [--device D] [--no-compute] [--http ADDR:PORT|off]\n"
            "     [--no-relay]\n"
            "      run this node in the foreground: WireGuard, gossip, the control socket,\n"
            "      the dashboard (default http://127.0.0.1:7980/: /, /api/status, /metrics);\n"
            "      --device: where its stages compute (default auto: the first usable GPU,\n"
            "      else the CPU; a LoRA job's stages compute on the CPU)\n"
            "  join TOKEN --state DIR [--name NAME] [--listen-port P] [--endpoint HOST:PORT]\n"
            "       [--threads N] [--device D] [--no-compute] [--http ADDR:PORT|off] [--no-relay]\n"
            "      join a mesh through an invite token, then run like up\n"
            "  status --state DIR [--json] [--svg FILE]\n"
            "      the members as the running node sees them (--svg: the plan as a picture)\n"
            "  leave --state DIR [--now]\n"
            "      leave the mesh for good (the others list this node as left); a node that\n"
            "      holds a stage of the running job hands its layers over first (--now: not)\n"
            "  set --state DIR --threads N\n"
            "      the running node computes with N threads from now on (its running stage\n"
            "      from its next step; the pool re-plans if its pace changes)\n"
            "  demo [--job JOB.json] [--dir DIR] [--keep] [--prompt TEXT]\n"
            "      (root) a pool of 3 nodes in network namespaces on this machine trains\n"
            "      the job (default configs/kjv/job.json), then samples the model (a LoRA\n"
            "      job: its base with the adapter)\n");
}

/* OpenBLAS reads OPENBLAS_CORETYPE only when it loads, so a weak automatic
 * choice is corrected by running this program again with the variable set. */
static void blas_reexec(char **argv)
{
    const char *core = kernels_blas_coretype_hint();
    if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the slower kernels rather than not at all */
    fprintf(stderr, "shardnode: note: OpenBLAS chose its generic kernels (%s); "
            "set OPENBLAS_CORETYPE=%s for full speed\n", kernels_blas_corename(), core);
}

/* A node's pool children (profiles, link probes, stages) may share the
 * machine's cores with other members' stages. OpenMP's idle threads spin by
 * default, and a spinning stage that waits for its input takes the cores a
 * computing one needs: two 2-thread stages on 2 cores ran 4x slower than with
 * sleeping threads (bench/shared_cores.py). The daemon sets the passive
 * policy for everything it starts, before any child loads libgomp, unless
 * the user chose one; the cost model counts a waiting stage as idle. */
static void pool_wait_policy(int argc, char **argv)
{
    if (argc < 2 || getenv("OMP_WAIT_POLICY")) return;
    if (strcmp(argv[1], "up") == 0 || strcmp(argv[1], "join") == 0 ||
        strcmp(argv[1], "demo") == 0)
        setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
}

/* Without --threads (or OMP_NUM_THREADS) every command computes with the
 * CPUs this process may use. OpenMP already follows the affinity mask
 * (taskset, a cpuset); a CPU quota (a container's --cpus) it does not see,
 * and 64 threads throttled to 2 CPUs' time crawl. A command's --threads
 * still sets the count it asks for. */
static void default_threads(void)
{
    if (getenv("OMP_NUM_THREADS")) return;
    int n = node_usable_cpus();
    if (n < kernels_threads()) kernels_set_threads(n);
}

int main(int argc, char **argv)
{
    pool_wait_policy(argc, argv);
    blas_reexec(argv);
    default_threads();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "gradcheck") == 0) return cmd_gradcheck(argc, argv);
    if (strcmp(argv[1], "bench") == 0) return cmd_bench(argc, argv);
    if (strcmp(argv[1], "tokenizer") == 0) return cmd_tokenizer(argc, argv);
    if (strcmp(argv[1], "generate") == 0) return cmd_generate(argc, argv);
    if (strcmp(argv[1], "train") == 0) return cmd_train(argc, argv);
    if (strcmp(argv[1], "batches") == 0) return cmd_batches(argc, argv);
    if (strcmp(argv[1], "export") == 0) return cmd_export(argc, argv);
    if (strcmp(argv[1], "import") == 0) return cmd_import(argc, argv);
    if (strcmp(argv[1], "probe-links") == 0) return cmd_probe_links(argc, argv);
    if (strcmp(argv[1], "fetch") == 0) return cmd_fetch(argc, argv);
    if (strcmp(argv[1], "stage-resume") == 0) return cmd_stage_resume(argc, argv);
    if (strcmp(argv[1], "plan") == 0) return cmd_plan(argc, argv);
    if (strcmp(argv[1], "profile") == 0) return cmd_profile(argc, argv);
    if (strcmp(argv[1], "devices") == 0) return cmd_devices(argc, argv);
    if (strcmp(argv[1], "link") == 0) return cmd_link(argc, argv);
    if (strcmp(argv[1], "init") == 0) return cmd_init(argc, argv);
    if (strcmp(argv[1], "invite") == 0) return cmd_invite(argc, argv);
    if (strcmp(argv[1], "up") == 0) return cmd_up(argc, argv);
    if (strcmp(argv[1], "join") == 0) return cmd_join(argc, argv);
    if (strcmp(argv[1], "status") == 0) return cmd_status(argc, argv);
    if (strcmp(argv[1], "leave") == 0) return cmd_leave(argc, argv);
    if (strcmp(argv[1], "set") == 0) return cmd_set(argc, argv);
    if (strcmp(argv[1], "demo") == 0) return cmd_demo(argc, argv);
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "shardnode: unknown command \"%s\" (try shardnode help)\n", argv[1]);
    return 2;
}
