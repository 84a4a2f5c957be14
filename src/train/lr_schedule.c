#include "train/lr_schedule.h"

#include <math.h>
#include <string.h>

double lr_base(const TrainConfig *t, long global_batch) {
    if (strcmp(t->lr_scaling, "linear") == 0) return t->lr * global_batch / 256.0;
    return t->lr;
}

double lr_at(const TrainConfig *t, double base, long step, long steps_per_epoch, long total_steps) {
    if (step < t->warmup_steps) return base * (double)(step + 1) / t->warmup_steps;
    if (strcmp(t->schedule, "step") == 0) {
        long epoch = steps_per_epoch > 0 ? step / steps_per_epoch : 0;
        return base * pow(t->step_gamma, (double)(epoch / t->step_every));
    }
    if (strcmp(t->schedule, "cosine") == 0) {
        long span = total_steps - t->warmup_steps;
        double progress = span > 0 ? (double)(step - t->warmup_steps) / span : 1.0;
        if (progress > 1.0) progress = 1.0;
        return t->min_lr + (base - t->min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
    }
    return base;
}

int lr_in_warmup(const TrainConfig *t, long step) { return step < t->warmup_steps; }
