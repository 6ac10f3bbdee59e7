/* cmd_train.c - `batchfit train`: options to the library's configuration,
 * the run (bfit_train), its result; signals stop it at a step boundary.
 * Parses, calls and prints. */
#include "cli.h"

#include <pthread.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --help in three parts around the image options that find shares */
static void help_data(void)
{
    fputs("Usage: batchfit train --model FILE|PRESET [OPTIONS]\n"
         "\n"
         "Train a model on a data set, evaluating on its test split after each epoch.\n"
         "--batch is the effective batch (samples per optimizer step); the micro-batch\n"
         "that runs on the device is chosen by the memory plan unless given, and\n"
         "gradient accumulation covers the rest.\n"
         "\n"
         "Model and data:\n"
         "  --model FILE|PRESET   a preset (mlp, cnn, resnet18, resnet50, vgg16; token\n"
         "                        models: gpt-nano, gpt2, bert-base), a model spec file\n"
         "                        (docs/model-spec.md, e.g. models/cnn.cfg, models/\n"
         "                        resnet-mini.cfg, models/gpt-nano.cfg) or an ONNX file\n"
         "                        exported from PyTorch (docs/onnx.md)\n"
         "  --init file|random    an ONNX model's starting weights: the file's (default)\n"
         "                        or drawn as PyTorch's default init\n"
         "  --weights FILE        start from these saved weights (a --save file: to\n"
         "                        train more after a finished run, or fine-tune); the\n"
         "                        optimizer state and the lr schedule start afresh\n"
         "  --data NAME|PATH      fashion-mnist (default), an MNIST-format directory,\n"
         "                        IMAGES,LABELS IDX files, or a CSV file; for token\n"
         "                        models kjv, a token file or a .txt file (docs/data.md)\n"
         "  --test-data PATH      evaluate on this instead of the data set's test split\n"
         "                        (a single CSV file has none)\n",
          stdout);
}

static void help_batch(void)
{
    fputs("  --csv-header yes|no|auto   whether a CSV file's first row is a header (default\n"
         "                        auto: yes when it holds only names, no when only numbers;\n"
         "                        the decision is printed)\n"
         "  --epochs N            passes over the training data (default 1)\n"
         "  --epoch-samples N     samples per epoch (default: the whole training set)\n"
         "  --eval-samples N      test samples to evaluate on (default: all)\n"
         "  --max-steps N         stop after N optimizer steps\n"
         "  --augment             random crop (pad 2) and horizontal flip of images\n"
         "  --no-normalize        do not standardise inputs by the training set's mean/std\n"
         "  --no-prefetch         load samples on the training thread\n"
         CLI_SEQ_HELP
         "  --seq-max N           token models: train on the data's lines (documents) as\n"
         "                        sequences of varying length, cut at N tokens; each\n"
         "                        micro-batch runs at its longest (default: windows of\n"
         "                        the model's length)\n"
         CLI_ATTENTION_HELP
         "  --mask-tokens P       token models: BERT's masked-LM objective instead of the\n"
         "                        next token: a share P of each sequence's tokens (0.15)\n"
         "                        is predicted, 80% of them replaced by --mask-id ID\n"
         "                        (the tokenizer's [MASK]), 10% by a random id, 10% kept;\n"
         "                        --special-ids ID,... are never masked ([CLS], [SEP])\n"
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
         "  --margin F            fraction of memory kept free when choosing m (default 0.1)\n",
          stdout);
}

static void help_run(void)
{
    puts("Optimisation:\n"
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
         "  --threads N|auto      CPU threads (default: all cores); while another job keeps\n"
         "                        the cores busy they are packed onto half of them where\n"
         "                        that trains faster (the same count, the same results);\n"
         "                        auto: the count may change too (results then vary)\n"
         "  --no-pack             keep the threads spread over their cores\n"
         "  --device NAME         cpu, cuda, cuda:N or auto (default auto: a GPU when one\n"
         "                        is present and runs every op and the precision of the\n"
         "                        model, else cpu; the log's start event says why)\n"
         "  --monitor SECONDS     a monitor event in the log (the device's use, memory of\n"
         "                        this and other processes, throttling) every SECONDS\n"
         "                        at a step boundary (default 10; 0 for none)\n"
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
         "  --memory-schedule-rank R   the simulated memory events (--memory-schedule)\n"
         "                        happen on rank R only\n"

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

static void help(void)
{
    help_data();
    fputs(cli_help_images, stdout);
    help_batch();
    help_run();
}

static const struct option opts[] = {
    {"resize", required_argument, 0, 1}, {"center-crop", required_argument, 0, 1},
    {"random-resized-crop", required_argument, 0, 1}, {"loader-threads", required_argument, 0, 1},
    {"skip-bad-images", no_argument, 0, 1}, {"no-dct-scaling", no_argument, 0, 1},
    {"mean", required_argument, 0, 1}, {"std", required_argument, 0, 1},
    {"model", required_argument, 0, 1}, {"data", required_argument, 0, 1},
    {"init", required_argument, 0, 1}, {"weights", required_argument, 0, 1},
    {"epochs", required_argument, 0, 1}, {"epoch-samples", required_argument, 0, 1},
    {"eval-samples", required_argument, 0, 1}, {"max-steps", required_argument, 0, 1},
    {"seq-max", required_argument, 0, 1}, {"seq", required_argument, 0, 1},
    {"attention", required_argument, 0, 1}, {"mask-tokens", required_argument, 0, 1},
    {"mask-id", required_argument, 0, 1}, {"special-ids", required_argument, 0, 1},
    {"augment", no_argument, 0, 1}, {"no-normalize", no_argument, 0, 1},
    {"no-prefetch", no_argument, 0, 1}, {"no-pack", no_argument, 0, 1},
    {"batch", required_argument, 0, 1},
    {"batch-tokens", required_argument, 0, 1},
    {"micro-batch", required_argument, 0, 1}, {"eval-batch", required_argument, 0, 1},
    {"memory", required_argument, 0, 1}, {"margin", required_argument, 0, 1},
    {"optimizer", required_argument, 0, 1}, {"lr", required_argument, 0, 1},
    {"momentum", required_argument, 0, 1}, {"nesterov", no_argument, 0, 1},
    {"weight-decay", required_argument, 0, 1}, {"schedule", required_argument, 0, 1},
    {"warmup", required_argument, 0, 1}, {"step-size", required_argument, 0, 1},
    {"gamma", required_argument, 0, 1}, {"clip", required_argument, 0, 1},
    {"seed", required_argument, 0, 1}, {"threads", required_argument, 0, 1},
    {"save", required_argument, 0, 1}, {"log", required_argument, 0, 1},
    {"report", required_argument, 0, 1},
    {"batch-min", required_argument, 0, 1}, {"batch-max", required_argument, 0, 1},
    {"batch-schedule", required_argument, 0, 1}, {"batch-instead-of-decay", no_argument, 0, 1},
    {"lr-scaling", required_argument, 0, 1}, {"rewarmup", required_argument, 0, 1},
    {"lr-ref-batch", required_argument, 0, 1},
    {"memory-schedule", required_argument, 0, 1}, {"test-data", required_argument, 0, 1},
    {"device", required_argument, 0, 1}, {"conv-algo", required_argument, 0, 1},
    {"monitor", required_argument, 0, 1},
    {"precision", required_argument, 0, 1}, {"recompute", required_argument, 0, 1},
    {"no-lean", no_argument, 0, 1}, {"loss-scale", required_argument, 0, 1},
    {"loss-scale-interval", required_argument, 0, 1},
    {"csv-header", required_argument, 0, 1}, {"checkpoint", required_argument, 0, 1},
    {"checkpoint-every", required_argument, 0, 1}, {"keep", required_argument, 0, 1},
    {"resume", required_argument, 0, 1}, {"wait-for-memory", required_argument, 0, 1},
    {"dist", required_argument, 0, 1}, {"memory-schedule-rank", required_argument, 0, 1},
    {"quiet", no_argument, 0, 1}, {"json", no_argument, 0, 1}, {"help", no_argument, 0, 1},
    {0, 0, 0, 0}};

/* ---- signals: a stop at the next micro-step boundary, then a checkpoint --- */

static volatile sig_atomic_t stop_signal;
/* the run has ended (bfit_train returned): a signal now is a launcher
 * ending the job because another process exited first; there is nothing
 * left to stop, and a first one is not announced */
static volatile sig_atomic_t run_over, late_signal;

static int job_size = 1, job_rank; /* one of several processes (mpirun): the ranks stop together */
static int checkpointed; /* --checkpoint or --resume: a stop writes a checkpoint */

static void on_signal(int sig)
{
    static const char first[] = "\nbatchfit: stopping at the next micro-step boundary and writing a checkpoint "
                                "(again to exit at once)\n";
    static const char bare[] = "\nbatchfit: stopping at the next micro-step boundary; without --checkpoint there "
                               "will be nothing to resume from (again to exit at once)\n";
    /* a launcher passes a signal on to every process, and ends the job with
     * one when a process died: the ranks stop together at a boundary unless
     * one is gone, and then the last checkpoint is the one to resume */
    static const char many[] = "\nbatchfit: stopping every process at the next step boundary, rank 0 writing a "
                               "checkpoint (if a process died, the launcher ends the job instead: resume from the "
                               "last checkpoint, which is whole)\n";
    static const char many_bare[] = "\nbatchfit: stopping every process at the next step boundary; without "
                                    "--checkpoint there will be nothing to resume from\n";
    if (stop_signal || late_signal)
        _exit(128 + sig); /* the second: at once; the last checkpoint is whole (atomic) */
    if (run_over) {
        late_signal = sig;
        return;
    }
    stop_signal = sig;
    if (job_rank == 0 && job_size > 1 && write(STDERR_FILENO, checkpointed ? many : many_bare,
                                               checkpointed ? sizeof many - 1 : sizeof many_bare - 1) < 0)
        return;
    if (job_rank == 0 && job_size == 1 && write(STDERR_FILENO, checkpointed ? first : bare,
                                                checkpointed ? sizeof first - 1 : sizeof bare - 1) < 0)
        return;
}

static sigset_t stop_set;

static void *watch_signals(void *arg)
{
    int sig;
    (void)arg;
    for (;;)
        if (sigwait(&stop_set, &sig) == 0)
            on_signal(sig);
    return NULL;
}

/* SIGINT and SIGTERM are taken by a thread of their own (sigwait), blocked
 * in every other: a handler that ran on a computing thread interrupted
 * oneDNN's AVX2 kernels, and one run in about 15 then died of a corrupted
 * heap inside a matmul (an AMD EPYC, 2026-11-28; no sanitizer saw a bad
 * write of ours). Threads made later (OpenMP's, the loader's, MPI's)
 * inherit the mask. Where the thread cannot start, the handler it was. */
static void catch_signals(void)
{
    struct sigaction sa;
    pthread_t t;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &stop_set, NULL) == 0 && pthread_create(&t, NULL, watch_signals, NULL) == 0) {
        pthread_detach(t);
    } else {
        pthread_sigmask(SIG_UNBLOCK, &stop_set, NULL);
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
}

/* Whether this process is one of a group that trains together: with
 * --dist off each process a launcher started trains alone, and speaks for
 * itself (its result, its stop). */
static void job_of(const bfit_config *c)
{
    char mode[16] = "";
    bfit_config_get(c, "dist", mode, sizeof mode);
    if (strcmp(mode, "off"))
        bfit_dist_info(&job_size, &job_rank);
}

/* The directory of a checkpoint file. */
static void dir_of(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    snprintf(dir, n, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
}

/* The signal that stopped the run: this process's, or (data-parallel) the
 * one another rank caught, which the result carries. */
static int stop_sig(const bfit_result *res)
{
    double v = res ? bfit_result_number(res, "stop_flag") : NAN; /* NaN: none */
    return stop_signal ? (int)stop_signal : v > 0 && v < 256 ? (int)v : 0;
}

static int stop_code(const bfit_result *res) { return stop_sig(res) == SIGTERM ? EXIT_SIGTERM : EXIT_SIGINT; }

/* How the run was started, for the command that resumes it. */
static const char *launcher(void)
{
    static char b[48];
    b[0] = 0;
    if (job_size > 1) /* clang warns of an empty format string */
        snprintf(b, sizeof b, "mpirun -np %d ", job_size);
    return b;
}

/* A run that stopped early: what happened and the command that resumes it. */
static int stopped(const bfit_result *res, int rc)
{
    char dir[4200];
    const char *ck = res ? bfit_result_string(res, "checkpoint") : NULL;
    if (rc == BFIT_ESTOPPED) {
        int s = stop_sig(res);
        const char *sig = s == SIGTERM ? "SIGTERM" : s == SIGINT ? "SIGINT" : "a request";
        fprintf(stderr, "batchfit: stopped by %s at step %.0f", sig, res ? bfit_result_number(res, "steps") : 0.0);
        if (!stop_signal && job_size > 1 && res && bfit_result_number(res, "stop_rank") >= 0)
            fprintf(stderr, " (sent to rank %.0f; every rank stopped at this step)", bfit_result_number(res, "stop_rank"));
        fputc('\n', stderr);
        if (ck && ck[0]) {
            dir_of(ck, dir, sizeof dir);
            fprintf(stderr, "batchfit: the run's state is in %s; resume with: %sbatchfit train --resume %s\n", ck,
                    launcher(), dir);
        } else {
            fprintf(stderr, "batchfit: no checkpoint was written (give --checkpoint DIR to be able to resume)\n");
        }
        return stop_code(res);
    }
    cli_lib_error();
    if (ck && ck[0]) {
        dir_of(ck, dir, sizeof dir);
        fprintf(stderr, "batchfit: when the memory is back, resume with: %sbatchfit train --resume %s\n", launcher(),
                dir);
    } else {
        fprintf(stderr, "batchfit: no checkpoint was written (give --checkpoint DIR to be able to resume)\n");
    }
    return EXIT_MEMORY;
}

/* Data-parallel: a failure the other processes have not learnt of would
 * leave them waiting for this one: end the job. Otherwise MPI ends
 * cleanly (a launcher counts a process that exits without it as failed). */
static int finish_dist(int rc, const bfit_result *res, int code)
{
    if (rc != BFIT_OK && res && bfit_result_number(res, "dist_alone") == 1) {
        fprintf(stderr, "batchfit: ending every process of the job (the others cannot learn of this failure)\n");
        fflush(NULL);
        bfit_dist_abort(code);
    }
    bfit_dist_finalize();
    return code;
}

/* What the run's end means for the exit code, said on stderr. */
static int outcome(const bfit_result *res, int rc, unsigned flags)
{
    int rank = job_rank, report = res && bfit_result_number(res, "report_written") == 1;
    const char *path = report ? bfit_result_string(res, "report") : ""; /* the checkpoint's, resumed without it */

    if (rc != BFIT_OK && rank != 0 && rc == BFIT_EPEER)
        return EXIT_FAIL; /* rank 0 says which rank failed and why */
    if (rc == BFIT_ESTOPPED || (rc == BFIT_ENOMEM && res && !strcmp(bfit_result_string(res, "stopped"), "memory"))) {
        int code = rank == 0 ? stopped(res, rc) : rc == BFIT_ESTOPPED ? stop_code(res) : EXIT_MEMORY;
        if (report && rank == 0)
            fprintf(stderr, "batchfit: the report of the stopped run is in %s\n", path);
        return code;
    }
    if (rc != BFIT_OK) {
        cli_lib_error();
        if (report)
            fprintf(stderr, "batchfit: the report of the failed run is in %s\n", path);
        return EXIT_FAIL;
    }
    if (rank != 0)
        return EXIT_OK;
    if (report && !(flags & 2))
        fprintf(stderr, "batchfit: report written to %s\n", path);
    cli_print(res, flags & 1);
    return EXIT_OK;
}

static const char *const local[] = {"json", "quiet", NULL};

int cmd_train(int argc, char **argv)
{
    static const cli_cmd cmd = {"train", opts, help, local, NULL};
    bfit_config *c = bfit_config_new();
    bfit_result *res = NULL;
    unsigned flags;
    int code, rc;

    if (!c) {
        cli_lib_error();
        return EXIT_FAIL;
    }
    if ((code = cli_parse(&cmd, argc, argv, c, &flags)) >= 0) {
        bfit_config_free(c);
        return code;
    }
    bfit_config_set_progress(c, flags & 2 ? NULL : stderr);
    {
        char ck[4096] = "", rs[4096] = "";
        bfit_config_get(c, "checkpoint", ck, sizeof ck);
        bfit_config_get(c, "resume", rs, sizeof rs);
        checkpointed = ck[0] || rs[0];
    }
    job_of(c);
    catch_signals();
    bfit_config_set_stop_flag(c, &stop_signal);
    rc = bfit_train(c, &res);
    run_over = 1;
    job_of(c); /* MPI's group now, where the run set one up */
    code = outcome(res, rc, flags);
    code = finish_dist(rc, res, code);
    bfit_result_free(res);
    bfit_config_free(c);
    return code;
}
