// op_log.h - a recorded sequence of calls, replayed later in order: how a backend without CUDA graphs
// (the CPU reference) captures the training step, and how the communicator's collectives join it.
//
// An entry is a function and a private copy of its arguments: values, and the pointers the call was
// given (the buffers, never their contents). A replay therefore does what the capture saw, on whatever
// the buffers hold at replay time, with every scalar frozen at capture - the semantics of a CUDA graph,
// so a step that would go wrong as a graph (a host value that changes per step baked in) goes wrong on
// the CPU too, where CI sees it.
#ifndef AMPTRAIN_OP_LOG_H
#define AMPTRAIN_OP_LOG_H

#include <stddef.h>

typedef void (*OpReplayFn)(const void *args);
typedef struct OpLog OpLog;

OpLog *op_log_create(void);
// Appends fn with a copy of args[0..bytes).
void op_log_append(OpLog *log, OpReplayFn fn, const void *args, size_t bytes);
// Calls every entry in order with its copy of the arguments.
void op_log_replay(const OpLog *log);
void op_log_free(OpLog *log);

#endif
