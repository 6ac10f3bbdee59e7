/* cmd_train.c - `batchfit train`: options to a bfit_train_cfg, run, report. */
#include "base/err.h"
#include "cli/cli.h"
#include "train/trainer.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void)
{
    puts("Usage: batchfit train --model FILE|PRESET [OPTIONS]\n"
         "\n"
         "Train a model on a data set, evaluating on its test split after each epoch.\n"
         "--batch is the effective batch (samples per optimizer step); the micro-batch\n"
         "that runs on the device is chosen by the memory plan unless given, and\n"
         "gradient accumulation covers the rest.\n"
         "\n"
         "Model and data:\n"
         "  --model FILE|PRESET   model spec (docs/model-spec.md), e.g. models/cnn.cfg, an\n"
         "                        ONNX file exported from PyTorch (docs/onnx.md), or a\n"
         "                        preset: mlp, cnn, resnet18, resnet50, vgg16\n"
         "  --init file|random    an ONNX model's starting weights: the file's (default)\n"
         "                        or drawn as PyTorch's default init\n"
         "  --data NAME|PATH      fashion-mnist (default), an MNIST-format directory,\n"
         "                        IMAGES,LABELS IDX files, or a CSV file\n"
         "  --test-data PATH      evaluate on this instead of the data set's test split\n"
         "                        (a single CSV file has none)\n"
         "  --csv-header yes|no|auto   whether a CSV file's first row is a header (default\n"
         "                        auto: yes when it holds only names, no when only numbers;\n"
         "                        the decision is printed)\n"
         "  --epochs N            passes over the training data (default 1)\n"
         "  --epoch-samples N     samples per epoch (default: the whole training set)\n"
         "  --eval-samples N      test samples to evaluate on (default: all)\n"
         "  --max-steps N         stop after N optimizer steps\n"
         "  --augment             random crop (pad 2) and horizontal flip of images\n"
         "  --no-normalize        do not standardise inputs by the training set's mean/std\n"
         "  --no-prefetch         load samples on the training thread\n"
         "  --seq-max N           token models: train on the data's lines (documents) as\n"
         "                        sequences of varying length, cut at N tokens; each\n"
         "                        micro-batch runs at its longest (default: windows of\n"
         "                        the model's length)\n"
         "Batch and memory:\n"
         "  --batch N|auto|adaptive  effective batch E (default 128); auto: E and the micro-\n"
         "                        batch chosen, and re-chosen as training goes, for goodput\n"
         "                        (measured throughput x the statistical efficiency the\n"
         "                        gradient noise scale implies) within --batch-min/--batch-max;\n"
         "                        adaptive: E follows the measured noise scale\n"
         "  --batch-tokens N|adaptive   token models: the effective batch in tokens that\n"
         "                        have a label; a step takes whole sequences until they\n"
         "                        reach N; --micro-batch, --batch-min/--batch-max,\n"
         "                        --lr-ref-batch and --batch-schedule then count tokens too\n"
         "  --batch-min N --batch-max N   bounds for auto and adaptive (default 16 and 4096;\n"
         "                        with --batch-tokens 1024 and 65536 tokens)\n"
         "  --lr-ref-batch N      the effective batch --lr is given for (default: 128 with\n"
         "                        --batch auto, where E starts there, else the first E)\n"
         "  --batch-schedule S    E by step (\"0:32,500:128,1000:512\") or epoch (\"e0:32,e2:128\")\n"
         "  --batch-instead-of-decay   with --schedule step: grow E by 1/gamma where the lr\n"
         "                        would decay, keeping the lr (Smith et al. 2017)\n"
         "  --lr-scaling linear|sqrt|none|adascale   lr rule when E changes (default linear\n"
         "                        for sgd, sqrt for adamw; adascale: AdaScale's gain from the\n"
         "                        noise scale, auto only); --rewarmup N steps of ramp (default\n"
         "                        100; with auto, steps of --lr-ref-batch samples)\n"
         "  --memory-schedule S   change the device capacity at steps, to simulate another\n"
         "                        process taking memory: \"200:150MiB,400:1GiB\"\n"
         "  --micro-batch auto|N  device micro-batch m (default auto: the largest that fits)\n"
         "  --eval-batch N        micro-batch for evaluation (default 1000, or what fits)\n"
         "  --memory SIZE         device memory capacity, e.g. 512MiB, 2GiB (default: available RAM)\n"
         "  --margin F            fraction of memory kept free when choosing m (default 0.1)\n"
         "Optimisation:\n"
         "  --optimizer sgd|adamw (default sgd)\n"
         "  --lr X                base learning rate (default 0.05)\n"
         "  --momentum X          SGD momentum (default 0.9)\n"
         "  --nesterov            Nesterov momentum\n"
         "  --weight-decay X      (default 0 for SGD, 0.01 for AdamW)\n"
         "  --schedule constant|step|cosine  (default constant)\n"
         "  --warmup N            linear warm-up steps (default 0)\n"
         "  --step-size N --gamma X   step schedule: multiply by X every N steps\n"
         "  --clip X              clip the global gradient norm to X\n"
         "Run:\n"
         "  --seed N              seed for init, shuffling, dropout, augmentation (default 1)\n"
         "  --threads N           CPU threads (default: all cores)\n"
         "  --device NAME         cpu, cuda, cuda:N or auto (default auto: a GPU when one\n"
         "                        is present and batchfit was built with CUDA, else cpu)\n"
         "  --conv-algo fastest|lean|auto  a GPU's convolution algorithms: the fastest,\n"
         "                        the smallest workspaces, or auto: the fastest unless\n"
         "                        the leanest fit a larger micro-batch (default fastest;\n"
         "                        the cpu has one choice)\n"
         CLI_STORAGE_HELP
         "  --loss-scale none|dynamic|S  dynamic loss scaling (default: dynamic for f16,\n"
         "                        none otherwise): the loss times S (default 65536)\n"
         "                        before backward; a step with inf/NaN gradients is\n"
         "                        skipped, logged and counted (its samples count) and S\n"
         "                        halved; S doubles after --loss-scale-interval N clean\n"
         "                        steps (default 2000)\n"
         "  --save FILE           write the final weights (safetensors)\n"
         "  --checkpoint DIR      write checkpoints (the whole run's state) into DIR\n"
         "  --checkpoint-every N|Ns|Nmin|Nh   every N optimizer steps or after this\n"
         "                        long (default 10min); also at the end and when stopped\n"
         "  --keep K              keep the newest K checkpoints (default 3)\n"
         "  --resume DIR|FILE     continue the run of a checkpoint (DIR: its newest); the\n"
         "                        options it was started with apply, and giving one that\n"
         "                        contradicts them is an error (memory, threads, device\n"
         "                        and outputs may change)\n"
         "  --wait-for-memory T   on a shared device (a GPU), when not even micro-batch 1\n"
         "                        fits, wait up to T (90, 30s, 5min) for memory to come\n"
         "                        back (default 5min), then checkpoint and exit 3\n"
         "Data-parallel (docs/distributed.md): mpirun -np N batchfit train ... trains on N\n"
         "processes, each with its own device and memory, one global effective batch:\n"
         "  --dist auto|on|off    train with every process the launcher started (auto:\n"
         "                        when it started several; on: also alone; default auto)\n"
         "  --memory-schedule-rank R   the simulated memory events (--memory-schedule,\n"
         "                        --fail-alloc) happen on rank R only\n"
         "  --fail-alloc N        tests: the N-th device allocation fails (an out-of-memory\n"
         "                        the run recovers from by a smaller micro-batch)\n"
         "  --sample-check        log each epoch's count and checksum of the samples\n"
         "                        trained on, all ranks' (for tests)\n"
         "  --log FILE            write a JSON-lines event log\n"
         "  --report FILE         write the run report (HTML, see `batchfit report --help`)\n"
         "                        at the end, also after a failure\n"
         "  --quiet               no progress output\n"
         "  --json                print the result as JSON on stdout\n"
         "\n"
         "Example:\n"
         "  batchfit train --model models/cnn.cfg --data fashion-mnist --batch 128 --epochs 5 \\\n"
         "      --optimizer sgd --lr 0.05 --save cnn.safetensors --log train.jsonl --report train.html\n"
         "\n"
         "SIGINT or SIGTERM stops at the next micro-step boundary and writes a checkpoint\n"
         "(with --checkpoint); a second one exits at once, the last checkpoint intact.\n"
         "\n"
         "Exit status: 0 trained, 1 failed, 2 usage error, 3 out of memory: not even\n"
         "micro-batch 1 fitted and memory did not come back (a checkpoint was written),\n"
         "130 stopped by SIGINT, 143 stopped by SIGTERM.");
}

enum {
    O_MODEL = 256, O_DATA, O_EPOCHS, O_EPOCH_SAMPLES, O_EVAL_SAMPLES, O_MAX_STEPS, O_AUGMENT, O_NO_NORM,
    O_NO_PREFETCH, O_BATCH, O_MICRO, O_EVAL_BATCH, O_MEMORY, O_MARGIN, O_OPT, O_LR, O_MOM, O_NEST, O_WD,
    O_SCHED, O_WARMUP, O_STEP_SIZE, O_GAMMA, O_CLIP, O_SEED, O_THREADS, O_SAVE, O_LOG, O_QUIET, O_JSON, O_HELP,
    O_BMIN, O_BMAX, O_BSCHED, O_BIOD, O_LRSCALE, O_REWARM, O_MEMSCHED, O_TEST_DATA, O_DEVICE, O_REPORT, O_CONV,
    O_CSV_HEADER, O_CKPT, O_CKPT_EVERY, O_KEEP, O_RESUME, O_WAIT_MEM, O_LRREF, O_DIST, O_MEMSCHED_RANK,
    O_SAMPLE_CHECK, O_FAIL_ALLOC, O_PRECISION, O_RECOMPUTE, O_NO_LEAN, O_LOSS_SCALE, O_LS_INTERVAL, O_POISON,
    O_SEQ_MAX, O_BATCH_TOKENS, O_INIT
};

static const struct option opts[] = {
    {"model", required_argument, 0, O_MODEL}, {"data", required_argument, 0, O_DATA},
    {"init", required_argument, 0, O_INIT},
    {"epochs", required_argument, 0, O_EPOCHS}, {"epoch-samples", required_argument, 0, O_EPOCH_SAMPLES},
    {"eval-samples", required_argument, 0, O_EVAL_SAMPLES}, {"max-steps", required_argument, 0, O_MAX_STEPS},
    {"seq-max", required_argument, 0, O_SEQ_MAX},
    {"augment", no_argument, 0, O_AUGMENT}, {"no-normalize", no_argument, 0, O_NO_NORM},
    {"no-prefetch", no_argument, 0, O_NO_PREFETCH}, {"batch", required_argument, 0, O_BATCH},
    {"batch-tokens", required_argument, 0, O_BATCH_TOKENS},
    {"micro-batch", required_argument, 0, O_MICRO}, {"eval-batch", required_argument, 0, O_EVAL_BATCH},
    {"memory", required_argument, 0, O_MEMORY}, {"margin", required_argument, 0, O_MARGIN},
    {"optimizer", required_argument, 0, O_OPT}, {"lr", required_argument, 0, O_LR},
    {"momentum", required_argument, 0, O_MOM}, {"nesterov", no_argument, 0, O_NEST},
    {"weight-decay", required_argument, 0, O_WD}, {"schedule", required_argument, 0, O_SCHED},
    {"warmup", required_argument, 0, O_WARMUP}, {"step-size", required_argument, 0, O_STEP_SIZE},
    {"gamma", required_argument, 0, O_GAMMA}, {"clip", required_argument, 0, O_CLIP},
    {"seed", required_argument, 0, O_SEED}, {"threads", required_argument, 0, O_THREADS},
    {"save", required_argument, 0, O_SAVE}, {"log", required_argument, 0, O_LOG},
    {"report", required_argument, 0, O_REPORT},
    {"batch-min", required_argument, 0, O_BMIN}, {"batch-max", required_argument, 0, O_BMAX},
    {"batch-schedule", required_argument, 0, O_BSCHED}, {"batch-instead-of-decay", no_argument, 0, O_BIOD},
    {"lr-scaling", required_argument, 0, O_LRSCALE}, {"rewarmup", required_argument, 0, O_REWARM},
    {"lr-ref-batch", required_argument, 0, O_LRREF},
    {"memory-schedule", required_argument, 0, O_MEMSCHED}, {"test-data", required_argument, 0, O_TEST_DATA},
    {"device", required_argument, 0, O_DEVICE}, {"conv-algo", required_argument, 0, O_CONV},
    {"precision", required_argument, 0, O_PRECISION}, {"recompute", required_argument, 0, O_RECOMPUTE},
    {"no-lean", no_argument, 0, O_NO_LEAN}, {"loss-scale", required_argument, 0, O_LOSS_SCALE},
    {"loss-scale-interval", required_argument, 0, O_LS_INTERVAL},
    {"test-poison-step", required_argument, 0, O_POISON},
    {"csv-header", required_argument, 0, O_CSV_HEADER}, {"checkpoint", required_argument, 0, O_CKPT},
    {"checkpoint-every", required_argument, 0, O_CKPT_EVERY}, {"keep", required_argument, 0, O_KEEP},
    {"resume", required_argument, 0, O_RESUME}, {"wait-for-memory", required_argument, 0, O_WAIT_MEM},
    {"dist", required_argument, 0, O_DIST}, {"memory-schedule-rank", required_argument, 0, O_MEMSCHED_RANK},
    {"sample-check", no_argument, 0, O_SAMPLE_CHECK}, {"fail-alloc", required_argument, 0, O_FAIL_ALLOC},
    {"quiet", no_argument, 0, O_QUIET}, {"json", no_argument, 0, O_JSON}, {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0}};

/* What the options gave, before it becomes a configuration. */
typedef struct args {
    bfit_train_cfg c;
    int json, quiet, wd_set, mom_set, nest;
    int batch_given, tokens_given; /* --batch, --batch-tokens: one or the other */
    double mom, wd, gamma;
    bfit_opt_kind kind;
    bfit_sched_kind sk;
    long warmup, step_size;
    bfit_batch_point bpts[BFIT_BATCH_SCHEDULE_MAX];
    bfit_mem_point mpts[BFIT_MEM_SCHEDULE_MAX];
    /* the configuration fields the options set: compared with a checkpoint's */
    char set_names[64][32];
    const char *set[64];
    int nset;
} args;

/* Remember that option o set its field ("micro-batch" -> "micro_batch"). */
static void mark_set(args *a, const char *opt)
{
    if (a->nset == 64)
        return;
    snprintf(a->set_names[a->nset], sizeof a->set_names[0], "%s", opt);
    for (char *p = a->set_names[a->nset]; *p; p++)
        if (*p == '-')
            *p = '_';
    a->set[a->nset] = a->set_names[a->nset];
    a->nset++;
}

static int run_option(args *a, int o);

/* One option; returns 0, or -1 after a usage error. */
static int one_option(args *a, int o)
{
    bfit_train_cfg *c = &a->c;
    long v;
    switch (o) {
    case O_MODEL: c->model = optarg; break;
    case O_INIT:
        if (strcmp(optarg, "file") && strcmp(optarg, "random")) {
            cli_error("--init: expected file or random, got '%s'", optarg);
            return -1;
        }
        c->init_random = !strcmp(optarg, "random");
        break;
    case O_DATA: c->data = optarg; break;
    case O_TEST_DATA: c->test_data = optarg; break;
    case O_CSV_HEADER:
        if (bfit_csv_header_parse(optarg, &c->csv_header) != BFIT_OK) { cli_error("--csv-header: %s", bfit_errmsg()); return -1; }
        break;
    case O_EPOCHS: if (cli_int("--epochs", optarg, 1, BFIT_EPOCHS_MAX, &v)) return -1; c->epochs = (int)v; break;
    case O_EPOCH_SAMPLES: if (cli_int("--epoch-samples", optarg, 1, BFIT_COUNT_MAX, &v)) return -1; c->epoch_samples = v; break;
    case O_EVAL_SAMPLES: if (cli_int("--eval-samples", optarg, 1, BFIT_COUNT_MAX, &v)) return -1; c->eval_samples = v; break;
    case O_MAX_STEPS: if (cli_int("--max-steps", optarg, 1, BFIT_COUNT_MAX, &v)) return -1; c->max_steps = v; break;
    case O_AUGMENT: c->augment = 1; break;
    case O_NO_NORM: c->normalize = 0; break;
    case O_NO_PREFETCH: c->prefetch = 0; break;
    case O_SEQ_MAX: if (cli_int("--seq-max", optarg, 1, 1 << 24, &v)) return -1; c->seq_max = (int)v; break;
    case O_BATCH_TOKENS:
        c->batch_tokens = 1;
        if (!strcmp(optarg, "auto")) {
            cli_error("--batch-tokens auto is not supported yet: give a number of tokens or adaptive (or --batch "
                      "auto, in sequences)");
            return -1;
        }
        __attribute__((fallthrough)); /* the same values as --batch */
    case O_BATCH:
        if (!strcmp(optarg, "adaptive")) { c->adaptive = 1; c->auto_batch = 0; c->batch = 0; break; }
        if (!strcmp(optarg, "auto")) { c->auto_batch = 1; c->adaptive = 0; c->batch = 0; break; }
        c->adaptive = c->auto_batch = 0;
        if (cli_int(o == O_BATCH ? "--batch" : "--batch-tokens", optarg, 1, BFIT_BATCH_MAX, &v)) return -1;
        c->batch = (int)v;
        break;
    case O_BMIN: if (cli_int("--batch-min", optarg, 2, BFIT_BATCH_MAX, &v)) return -1; c->batch_min = (int)v; break;
    case O_BMAX: if (cli_int("--batch-max", optarg, 2, BFIT_BATCH_MAX, &v)) return -1; c->batch_max = (int)v; break;
    case O_BSCHED:
        if (bfit_batch_schedule_parse(optarg, a->bpts, BFIT_BATCH_SCHEDULE_MAX, &c->nbatch_schedule) != BFIT_OK) {
            cli_error("--batch-schedule: %s", bfit_errmsg());
            return -1;
        }
        c->batch_schedule = a->bpts;
        break;
    case O_BIOD: c->batch_instead_of_decay = 1; break;
    case O_LRSCALE: {
        bfit_lr_rule rule;
        if (bfit_lr_rule_parse(optarg, &rule) != BFIT_OK) { cli_error("--lr-scaling: %s", bfit_errmsg()); return -1; }
        c->lr_rule = (int)rule;
        break;
    }
    case O_LRREF: if (cli_int("--lr-ref-batch", optarg, 1, BFIT_BATCH_MAX, &v)) return -1; c->lr_ref_batch = (int)v; break;
    case O_REWARM: if (cli_int("--rewarmup", optarg, 0, BFIT_COUNT_MAX, &v)) return -1; c->rewarmup_steps = v; break;
    case O_MEMSCHED:
        if (bfit_mem_schedule_parse(optarg, a->mpts, BFIT_MEM_SCHEDULE_MAX, &c->nmemory_schedule) != BFIT_OK) {
            cli_error("--memory-schedule: %s", bfit_errmsg());
            return -1;
        }
        c->memory_schedule = a->mpts;
        break;
    case O_MICRO:
        if (!strcmp(optarg, "auto")) c->micro_batch = 0;
        else if (cli_int("--micro-batch", optarg, 1, BFIT_BATCH_MAX, &v)) return -1;
        else c->micro_batch = (int)v;
        break;
    case O_EVAL_BATCH: if (cli_int("--eval-batch", optarg, 1, BFIT_BATCH_MAX, &v)) return -1; c->eval_batch = (int)v; break;
    case O_MEMORY: if (cli_size("--memory", optarg, &c->memory)) return -1; break;
    case O_MARGIN: if (cli_double("--margin", optarg, 0, 0.99, &c->margin)) return -1; break;
    default: return run_option(a, o);
    }
    return 0;
}

/* The options of optimisation, the run and its outputs. */
static int run_option(args *a, int o)
{
    bfit_train_cfg *c = &a->c;
    long v;
    switch (o) {
    case O_OPT:
        if (bfit_optim_kind_parse(optarg, &a->kind) != BFIT_OK) { cli_error("--optimizer: %s", bfit_errmsg()); return -1; }
        break;
    case O_LR: if (cli_double("--lr", optarg, 1e-12, 1e6, &c->lr)) return -1; break;
    case O_MOM: if (cli_double("--momentum", optarg, 0, 0.999999, &a->mom)) return -1; a->mom_set = 1; break;
    case O_NEST: a->nest = 1; break;
    case O_WD: if (cli_double("--weight-decay", optarg, 0, 10, &a->wd)) return -1; a->wd_set = 1; break;
    case O_SCHED:
        if (bfit_lr_sched_parse(optarg, &a->sk) != BFIT_OK) { cli_error("--schedule: %s", bfit_errmsg()); return -1; }
        break;
    case O_WARMUP: if (cli_int("--warmup", optarg, 0, BFIT_COUNT_MAX, &a->warmup)) return -1; break;
    case O_STEP_SIZE: if (cli_int("--step-size", optarg, 1, BFIT_COUNT_MAX, &a->step_size)) return -1; break;
    case O_GAMMA: if (cli_double("--gamma", optarg, 1e-9, 1, &a->gamma)) return -1; break;
    case O_CLIP: if (cli_double("--clip", optarg, 1e-12, 1e12, &c->clip)) return -1; break;
    case O_SEED: if (cli_int("--seed", optarg, 0, INT64_MAX, &v)) return -1; c->seed = (uint64_t)v; break;
    case O_THREADS: if (cli_int("--threads", optarg, 1, 1024, &v)) return -1; c->threads = (int)v; break;
    case O_SAVE: c->save = optarg; break;
    case O_DEVICE: if (cli_device_check("--device", optarg)) return -1; c->device_name = optarg; break;
    case O_PRECISION: if (cli_storage_opt("--precision", optarg, &c->storage)) return -1; break;
    case O_RECOMPUTE: if (cli_storage_opt("--recompute", optarg, &c->storage)) return -1; break;
    case O_NO_LEAN: c->storage.lean = 0; break;
    case O_LOSS_SCALE:
        if (!strcmp(optarg, "none")) c->loss_scale = BFIT_LOSS_SCALE_NONE;
        else if (!strcmp(optarg, "dynamic")) c->loss_scale = BFIT_LOSS_SCALE_DYNAMIC;
        else if (cli_double("--loss-scale", optarg, 1e-7, 1e30, &c->loss_scale_init)) return -1;
        else c->loss_scale = BFIT_LOSS_SCALE_DYNAMIC;
        break;
    case O_LS_INTERVAL: if (cli_int("--loss-scale-interval", optarg, 1, BFIT_COUNT_MAX, &v)) return -1; c->loss_scale_interval = v; break;
    case O_POISON: if (cli_int("--test-poison-step", optarg, 1, BFIT_COUNT_MAX, &v)) return -1; c->poison_step = v; break;
    case O_CONV:
        if (bfit_conv_algo_parse(optarg, &c->conv_algo) != BFIT_OK) { cli_lib_error(); return -1; }
        break;
    case O_LOG: c->log = optarg; break;
    case O_REPORT: c->report = optarg; break;
    case O_CKPT: c->checkpoint = optarg; break;
    case O_CKPT_EVERY:
        if (bfit_parse_every(optarg, &c->checkpoint_steps, &c->checkpoint_seconds) != BFIT_OK) {
            cli_error("--checkpoint-every: %s", bfit_errmsg());
            return -1;
        }
        break;
    case O_KEEP: if (cli_int("--keep", optarg, 1, 1000000, &v)) return -1; c->checkpoint_keep = (int)v; break;
    case O_RESUME: c->resume = optarg; break;
    case O_WAIT_MEM:
        if (bfit_parse_duration(optarg, &c->wait_for_memory) != BFIT_OK) {
            cli_error("--wait-for-memory: %s", bfit_errmsg());
            return -1;
        }
        break;
    case O_DIST:
        if (bfit_dist_mode_parse(optarg, &c->dist) != BFIT_OK) { cli_lib_error(); return -1; }
        break;
    case O_MEMSCHED_RANK:
        if (cli_int("--memory-schedule-rank", optarg, 0, 1 << 20, &v)) return -1;
        c->memory_schedule_rank = (int)v;
        break;
    case O_SAMPLE_CHECK: c->sample_check = 1; break;
    case O_FAIL_ALLOC:
        if (cli_int("--fail-alloc", optarg, 1, INT64_MAX, &v)) return -1;
        c->fail_nth_alloc = (uint64_t)v;
        break;
    case O_QUIET: a->quiet = 1; break;
    case O_JSON: a->json = 1; break;
    default: return -1;
    }
    return 0;
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, args *a)
{
    int o, idx;
    a->c = bfit_train_cfg_default();
    a->c.data = "fashion-mnist";
    a->c.dist = BFIT_DIST_AUTO; /* under mpirun: the processes train together */
    a->kind = BFIT_OPT_SGD;
    a->sk = BFIT_SCHED_CONSTANT;
    a->gamma = 0.1;
    opterr = 0;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        if (o == O_HELP) {
            help();
            return EXIT_OK;
        }
        if (o == '?' || o == ':') {
            cli_bad_option(name);
            return cli_usage_hint("train");
        }
        if (one_option(a, o))
            return cli_usage_hint("train");
        /* --batch and --batch-tokens set one field group, "batch" */
        mark_set(a, o == O_BATCH_TOKENS ? "batch" : opts[idx].name);
        if (o == O_BATCH || o == O_BATCH_TOKENS)
            mark_set(a, "adaptive");
        a->batch_given |= o == O_BATCH;
        a->tokens_given |= o == O_BATCH_TOKENS;
    }
    if (cli_no_extra(argc, argv))
        return cli_usage_hint("train");
    if (!a->c.model && !a->c.resume) {
        cli_error("--model is required, e.g. --model models/cnn.cfg (or --resume DIR to continue a run)");
        return cli_usage_hint("train");
    }
    return -1;
}

/* The configuration from the options: the optimizer's and the schedule's
 * defaults under what was given. */
static int finish_cfg(args *a)
{
    bfit_train_cfg *c = &a->c;
    if (a->batch_given && a->tokens_given) {
        cli_error("--batch and --batch-tokens both give the effective batch: give one (samples or tokens)");
        return cli_usage_hint("train");
    }
    if ((c->adaptive || c->auto_batch) && c->batch_schedule) {
        cli_error("--batch %s cannot be combined with --batch-schedule", c->auto_batch ? "auto" : "adaptive");
        return cli_usage_hint("train");
    }
    if (c->lr_rule == BFIT_LR_ADASCALE && !c->auto_batch && !c->adaptive) {
        cli_error("--lr-scaling adascale needs the noise scale: use it with --batch auto (or adaptive)");
        return cli_usage_hint("train");
    }
    if (c->adaptive || c->auto_batch) {
        if (!c->batch_min)
            c->batch_min = c->batch_tokens ? 1024 : 16;
        if (!c->batch_max)
            c->batch_max = c->batch_tokens ? 65536 : 4096;
        if (c->batch_min > c->batch_max) {
            cli_error("--batch-min %d is above --batch-max %d", c->batch_min, c->batch_max);
            return cli_usage_hint("train");
        }
        c->batch = c->batch_min;
        if (c->auto_batch && !c->lr_ref_batch)
            c->lr_ref_batch = 128; /* --lr is for the default --batch */
    }
    c->opt = bfit_optim_cfg_default(a->kind);
    if (a->mom_set)
        c->opt.momentum = a->mom;
    if (a->wd_set)
        c->opt.weight_decay = a->wd;
    c->opt.nesterov = a->nest;
    c->sched = bfit_lr_schedule_default(a->sk);
    c->sched.warmup_steps = a->warmup;
    if (a->step_size)
        c->sched.step_size = a->step_size;
    c->sched.gamma = a->gamma;
    c->human = a->quiet ? NULL : stderr;
    c->resume_set = a->set;
    c->nresume_set = a->nset;
    return -1;
}

/* ---- signals: a stop at the next micro-step boundary, then a checkpoint --- */

static volatile sig_atomic_t stop_signal;

static int job_size = 1, job_rank; /* one of several processes (mpirun): the ranks stop together */

static void on_signal(int sig)
{
    static const char first[] = "\nbatchfit: stopping at the next micro-step boundary and writing a checkpoint "
                                "(again to exit at once)\n";
    /* a launcher passes a signal on to every process, and ends the job with
     * one when a process died: the ranks stop together at a boundary unless
     * one is gone, and then the last checkpoint is the one to resume */
    static const char many[] = "\nbatchfit: stopping every process at the next step boundary, rank 0 writing a "
                               "checkpoint (if a process died, the launcher ends the job instead: resume from the "
                               "last checkpoint, which is whole)\n";
    if (stop_signal)
        _exit(128 + sig); /* the second: at once; the last checkpoint is whole (atomic) */
    stop_signal = sig;
    if (job_rank == 0 && write(STDERR_FILENO, job_size > 1 ? many : first, job_size > 1 ? sizeof many - 1
                                                                                          : sizeof first - 1) < 0)
        return;
}

static void catch_signals(void)
{
    struct sigaction sa;
    bfit_dist_info(&job_size, &job_rank);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Tests of a kill inside the checkpoint write itself:
 * BFIT_TEST_KILL_IN_CHECKPOINT=N kills the process (SIGKILL) in the write of
 * its N-th checkpoint, with half the tensors in the temporary file. */
static long kill_in_checkpoint;

static void checkpoint_written_half(void *ud, const char *tmp_path)
{
    static long writes;
    (void)ud;
    (void)tmp_path;
    if (++writes == kill_in_checkpoint)
        raise(SIGKILL);
}

static void test_hooks(bfit_train_cfg *c)
{
    const char *e = getenv("BFIT_TEST_KILL_IN_CHECKPOINT");
    kill_in_checkpoint = e ? strtol(e, NULL, 10) : 0;
    if (kill_in_checkpoint > 0)
        c->on_checkpoint_write = checkpoint_written_half;
}

/* The directory of a checkpoint file. */
static void dir_of(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    snprintf(dir, n, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
}

static int stop_code(void) { return stop_signal == SIGTERM ? EXIT_SIGTERM : EXIT_SIGINT; }

/* How the run was started, for the command that resumes it. */
static const char *launcher(void)
{
    static char b[48];
    snprintf(b, sizeof b, job_size > 1 ? "mpirun -np %d " : "", job_size);
    return b;
}

/* A run that stopped early: what happened and the command that resumes it. */
static int stopped(const args *a, const bfit_train_result *r, int rc)
{
    char dir[4200];
    if (rc == BFIT_ESTOPPED) {
        const char *sig = stop_signal == SIGTERM ? "SIGTERM" : stop_signal == SIGINT ? "SIGINT" : "a request";
        fprintf(stderr, "batchfit: stopped by %s at step %lld\n", sig, (long long)r->steps);
        if (r->checkpoint[0]) {
            dir_of(r->checkpoint, dir, sizeof dir);
            fprintf(stderr, "batchfit: the run's state is in %s; resume with: %sbatchfit train --resume %s\n",
                    r->checkpoint, launcher(), dir);
        } else {
            fprintf(stderr, "batchfit: no checkpoint was written (give --checkpoint DIR to be able to resume)\n");
        }
        return stop_signal == SIGTERM ? EXIT_SIGTERM : EXIT_SIGINT;
    }
    cli_lib_error();
    if (r->checkpoint[0]) {
        dir_of(r->checkpoint, dir, sizeof dir);
        fprintf(stderr, "batchfit: when the memory is back, resume with: %sbatchfit train --resume %s\n", launcher(),
                dir);
    } else {
        fprintf(stderr, "batchfit: no checkpoint was written (give --checkpoint DIR to be able to resume)\n");
    }
    (void)a;
    return EXIT_MEMORY;
}

static int report(const args *a, const bfit_train_result *r)
{
    if (r->report_written && !a->quiet && a->c.report)
        fprintf(stderr, "batchfit: report written to %s\n", a->c.report);
    if (a->json)
        printf("{\"steps\":%lld,\"samples\":%lld,\"epochs\":%d,\"train_loss\":%.6f,\"test_loss\":%.6f,"
               "\"test_accuracy\":%.6f,\"train_seconds\":%.3f,\"micro_batch\":%d,\"batch\":%d,\"ooms\":%d,"
               "\"batch_changes\":%d,\"peak_bytes\":%llu,\"skipped_steps\":%lld,\"loss_scale\":%.9g}\n",
               (long long)r->steps, (long long)r->samples, r->epochs, r->train_loss, r->test_loss, r->test_acc,
               r->seconds, r->micro_batch, r->last_batch, r->ooms, r->batch_changes,
               (unsigned long long)r->peak_bytes, (long long)r->skipped_steps, r->loss_scale);
    else if (r->tokens)
        printf("test loss %.4f per token (%.4f bits) after %d epoch(s), %lld steps, %.1f s training (%.0f tokens/s; "
               "padding %.1f%% of the positions computed)\n",
               r->test_loss, r->test_loss / 0.69314718055994531, r->epochs, (long long)r->steps, r->seconds,
               r->seconds > 0 ? (double)r->tokens / r->seconds : 0.0,
               r->tokens_computed ? 100.0 * (1.0 - (double)r->tokens / (double)r->tokens_computed) : 0.0);
    else
        printf("test accuracy %.2f%% after %d epoch(s), %lld steps, %.1f s training (%.0f samples/s)\n",
               100 * r->test_acc, r->epochs, (long long)r->steps, r->seconds,
               r->seconds > 0 ? (double)r->samples / r->seconds : 0.0);
    if (!a->json && r->loss_scale > 0)
        printf("loss scaling: %lld step(s) skipped for inf/NaN gradients (their samples counted), final scale %g\n",
               (long long)r->skipped_steps, r->loss_scale);
    return EXIT_OK;
}

/* Data-parallel: a failure the other processes have not learnt of would
 * leave them waiting for this one: end the job. Otherwise MPI ends
 * cleanly (a launcher counts a process that exits without it as failed). */
static int finish_dist(int rc, const bfit_train_result *r, int code)
{
    if (rc != BFIT_OK && r->dist_alone) {
        fprintf(stderr, "batchfit: ending every process of the job (the others cannot learn of this failure)\n");
        fflush(NULL);
        bfit_dist_abort(code);
    }
    bfit_dist_finalize();
    return code;
}

int cmd_train(int argc, char **argv)
{
    args *a = calloc(1, sizeof *a);
    bfit_train_result r;
    int code, rc, size, rank;

    if (!a) {
        cli_error("out of memory");
        return EXIT_FAIL;
    }
    if ((code = parse_args(argc, argv, a)) >= 0 || (code = finish_cfg(a)) >= 0) {
        free(a);
        return code;
    }
    catch_signals();
    test_hooks(&a->c);
    a->c.stop = &stop_signal;
    rc = bfit_train(&a->c, &r);
    bfit_dist_info(&size, &rank);
    if (rc != BFIT_OK && rank != 0 && rc == BFIT_EPEER) {
        code = EXIT_FAIL; /* rank 0 says which rank failed and why */
    } else if (rc == BFIT_ESTOPPED || (rc == BFIT_ENOMEM && r.stopped == BFIT_ENOMEM)) {
        code = rank == 0 ? stopped(a, &r, rc) : rc == BFIT_ESTOPPED ? stop_code() : EXIT_MEMORY;
        if (r.report_written && rank == 0 && a->c.report)
            fprintf(stderr, "batchfit: the report of the stopped run is in %s\n", a->c.report);
    } else if (rc != BFIT_OK) {
        cli_lib_error();
        if (r.report_written && a->c.report)
            fprintf(stderr, "batchfit: the report of the failed run is in %s\n", a->c.report);
        code = EXIT_FAIL;
    } else {
        code = rank == 0 ? report(a, &r) : EXIT_OK;
    }
    free(a);
    return finish_dist(rc, &r, code);
}
