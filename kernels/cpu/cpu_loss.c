// cpu_loss.c - softmax cross-entropy with its backward seed, always in fp32 (double for the sums).
#include <math.h>
#include <stdlib.h>

#include "core/check.h"
#include "kernels/cpu/cpu_ops.h"

static int label_of(const int32_t *labels, int r, int classes) {
    const int label = labels[r];
    AMP_ASSERT(label >= 0 && label < classes, "softmax_xent: label %d of row %d not in [0, %d)", label, r,
               classes);
    return label;
}

void cpu_softmax_xent(Backend *be, int n, int classes, DType logits_dt, const void *logits,
                      const int32_t *labels, const BatchMix *mix, float smoothing, float *loss_out,
                      void *dlogits, const float *scale, float seed_factor) {
    (void)be;
    const size_t count = (size_t)n * classes;
    float *zf = cpu_floats_load(logits, logits_dt, count);  // (n, classes): logits, then the seed
    // The seed carries the loss scale, so fp16 gradients downstream stay clear of underflow.
    const float seed = (scale ? *scale : 1.0f) * seed_factor;
    const double eps = smoothing, uniform = (double)smoothing / classes;
    double loss = 0.0;
    for (int r = 0; r < n; r++) {
        float *z = zf + (size_t)r * classes;
        const int label = label_of(labels, r, classes);
        const int rolled = mix ? label_of(labels, (r + n - 1) % n, classes) : label;
        // Subtracting the row max keeps exp() finite; log-sum-exp gives the loss without log(0).
        float zmax = z[0];
        for (int k = 1; k < classes; k++)
            if (z[k] > zmax) zmax = z[k];
        double sum = 0.0;
        for (int k = 0; k < classes; k++) sum += exp((double)z[k] - zmax);
        const double log_sum = log(sum);
        // -sum_k t_k log p_k, with -log p_k = log_sum - (z_k - zmax), term by term of t.
        double row = log_sum - ((double)z[label] - zmax);
        if (mix) row = mix->lam * row + mix->rest * (log_sum - ((double)z[rolled] - zmax));
        if (smoothing != 0.0f) {
            double all = 0.0;
            for (int k = 0; k < classes; k++) all += log_sum - ((double)z[k] - zmax);
            row = (1.0 - eps) * row + uniform * all;
        }
        loss += row;
        for (int k = 0; k < classes; k++) {
            const double p = exp((double)z[k] - zmax - log_sum);
            double t = k == label ? 1.0 : 0.0;
            if (mix) t = (k == label ? (double)mix->lam : 0.0) + (k == rolled ? (double)mix->rest : 0.0);
            if (smoothing != 0.0f) t = (1.0 - eps) * t + uniform;
            z[k] = (float)((p - t) * seed);
        }
    }
    *loss_out = (float)(loss / n);
    cpu_floats_store(dlogits, logits_dt, zf, count, 0);
    free(zf);
}
