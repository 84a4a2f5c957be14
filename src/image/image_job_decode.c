// image_job_decode.c - an ImageJob decoded and transformed on the CPU (see image_job_decode.h).
#include "image/image_job_decode.h"

#include "core/check.h"
#include "image/image_augment.h"
#include "image/image_decode.h"
#include "image/image_decode_region.h"
#include "image/image_transform.h"

int image_job_decode(const ImageJob *job, int side, uint8_t *out, char *err, size_t err_cap) {
    const ImageGeometry *g = &job->geometry;
    AMP_ASSERT(g->win.height == side && g->win.width == side, "image job: window %dx%d for inputs of side %d",
               g->win.height, g->win.width, side);
    const int whole = g->box.top == 0 && g->box.left == 0 && g->box.height == job->height &&
                      g->box.width == job->width;
    DecodedImage img;
    CropBox held = {0, 0, job->height, job->width};
    int rc = whole ? image_decode(job->bytes, job->len, &img, err, err_cap)
                   : image_decode_region(job->bytes, job->len, g->box, &img, &held, err, err_cap);
    if (rc != 0) return 1;
    image_geometry_apply(&img, held, *g, out);
    image_free(&img);
    image_augment_run(&job->augment, out, side);
    return 0;
}
