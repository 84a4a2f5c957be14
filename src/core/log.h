// log.h - messages with the rank in front. log_info and log_warn print on rank 0 only (what every rank
// knows alike); log_warn_local and log_error on the rank that calls them (what only that rank met).
#ifndef AMPTRAIN_LOG_H
#define AMPTRAIN_LOG_H

// Called once by src/dist after start-up; before that, the process counts as rank 0 of 1.
void log_set_rank(int rank, int world_size);
int log_rank(void);  // this process's rank (0 before log_set_rank)

void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));        // stdout, rank 0
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));        // stderr, rank 0
void log_warn_local(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  // stderr, the calling rank
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));       // stderr, every rank

// 1 when the diagnostic log switch `name` (AMPTRAIN_CONV_LOG, AMPTRAIN_DECODE_LOG) is set to 1 in the environment.
int log_env_flag(const char *name);

#endif
