// cpu_graph.c - CUDA-graph semantics on the CPU backend: between graph_begin and graph_end every op is
// recorded into an OpLog (core/op_log.h) instead of run; graph_launch replays the log. What a replay
// reads is what the buffers hold then; every scalar argument is the one the capture saw. The trainer's
// graph path (train.cuda_graph: on) thus runs on the CPU too, and CI's tests hold it to plain launches.
//
// Which ops a capture records, runs or refuses is core/backend_ops.def's graph column. Copies between
// the host and the "device", waits and read-backs cannot be part of a graph (a CUDA capture refuses
// them, or bakes the host source in): called during a capture they end the job.
#include <stdlib.h>

#include "core/check.h"
#include "core/op_log.h"
#include "kernels/cpu/cpu_ops.h"

// ---- walks over an op's params (backend.h's BACKEND_PARAMS walks them as a parameter list) -------------

// The fields of its argument record: `type name;`, the struct itself for (S, type, name).
#define RECORD_FIELDS(params) BACKEND_SEQ_END(RECORD_FIELDS_A params)
#define RECORD_FIELDS_A(kind, type, name)                                                                    \
    type name;                                                                                               \
    RECORD_FIELDS_B
#define RECORD_FIELDS_B(kind, type, name)                                                                    \
    type name;                                                                                               \
    RECORD_FIELDS_A
#define RECORD_FIELDS_A_END
#define RECORD_FIELDS_B_END

// The record's initialiser after `be`: `, name`, `, *name` for (S, type, name).
#define RECORD_VALUES(params) BACKEND_SEQ_END(RECORD_VALUES_A params)
#define RECORD_VALUES_A(kind, type, name) RECORD_VALUE_##kind(name) RECORD_VALUES_B
#define RECORD_VALUES_B(kind, type, name) RECORD_VALUE_##kind(name) RECORD_VALUES_A
#define RECORD_VALUES_A_END
#define RECORD_VALUES_B_END
#define RECORD_VALUE_V(name) , name
#define RECORD_VALUE_S(name) , *name

// The replay's arguments after `be`, read from record r: `, r->name`, `, &r->name` for (S, type, name).
#define RECORD_ARGS(params) BACKEND_SEQ_END(RECORD_ARGS_A params)
#define RECORD_ARGS_A(kind, type, name) RECORD_ARG_##kind(name) RECORD_ARGS_B
#define RECORD_ARGS_B(kind, type, name) RECORD_ARG_##kind(name) RECORD_ARGS_A
#define RECORD_ARGS_A_END
#define RECORD_ARGS_B_END
#define RECORD_ARG_V(name) , r->name
#define RECORD_ARG_S(name) , &r->name

// ---- per recorded op: its argument record, its replay and its recording ---------------------------------
// The live Backend (its ops restored by then) travels with every record. Only ops returning void can be
// recorded: the recording's type would not match the Backend's field otherwise.

#define CAPTURE_RECORD(op, params)                                                                           \
    typedef struct {                                                                                         \
        Backend *be;                                                                                         \
        RECORD_FIELDS(params)                                                                                \
    } record_##op##_args;                                                                                    \
    static void replay_##op(const void *rec) {                                                               \
        const record_##op##_args *r = rec;                                                                   \
        r->be->op(r->be RECORD_ARGS(params));                                                                \
    }                                                                                                        \
    static void record_##op(Backend *be BACKEND_PARAMS(params)) {                                            \
        record_##op##_args r = {be RECORD_VALUES(params)};                                                   \
        op_log_append(cpu_graph_log(be), replay_##op, &r, sizeof r);                                         \
    }
#define CAPTURE_RUN(op, params)
// A refusal names every parameter and uses none.
#define CAPTURE_REFUSE(op, params)                                                                           \
    static void refuse_##op(Backend *be BACKEND_PARAMS(params)) {                                            \
        amp_fatal(__FILE__, __LINE__,                                                                        \
                  "cpu backend: " #op " during a graph capture (a replay cannot repeat it)");                \
    }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define BACKEND_OP(ret, op, cpu, cuda, graph, params) CAPTURE_##graph(op, params)
#include "core/backend_ops.def"
#undef BACKEND_OP
#pragma GCC diagnostic pop

// ---- capture, launch --------------------------------------------------------------------------------

void cpu_graph_begin(Backend *be) {
    AMP_ASSERT(cpu_graph_log(be) == NULL, "cpu backend: a graph capture is already under way");
    cpu_graph_set_log(be, op_log_create());
    cpu_graph_save_ops(be);
#define SWAP_RECORD(op) be->op = record_##op;
#define SWAP_RUN(op)
#define SWAP_REFUSE(op) be->op = refuse_##op;
#define BACKEND_OP(ret, op, cpu, cuda, graph, params) SWAP_##graph(op)
#include "core/backend_ops.def"
#undef BACKEND_OP
}

void *cpu_graph_end(Backend *be) {
    OpLog *log = cpu_graph_log(be);
    AMP_ASSERT(log != NULL, "cpu backend: graph_end without graph_begin");
    cpu_graph_restore_ops(be);
    cpu_graph_set_log(be, NULL);
    return log;
}

void cpu_graph_launch(Backend *be, void *graph) {
    AMP_ASSERT(cpu_graph_log(be) == NULL, "cpu backend: a graph launched during a capture");
    op_log_replay(graph);
}

void cpu_graph_destroy(Backend *be, void *graph) {
    (void)be;
    op_log_free(graph);
}
