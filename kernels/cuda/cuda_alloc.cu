// cuda_alloc.cu - the caching device allocator (see cuda_alloc.h for why it exists and why reuse is
// safe without events).
//
// Size classes: up to 1 MiB, multiples of 512 B (what torch rounds to), one free list per class; above,
// multiples of 2 MiB (torch's large-block granularity) in one free list searched for the exact size.
// The model allocates its fixed set of tensors once, so exact reuse is what steady state needs, and
// rounding wastes at most 2 MiB per large tensor (coarser classes wasted ~6% of 16 GB of activations).
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_alloc.h"
#include "kernels/cuda/cuda_internal.h"

#define ALLOC_SMALL_STEP 512
#define ALLOC_SMALL_LIMIT (1u << 20)
#define ALLOC_SMALL_CLASSES (ALLOC_SMALL_LIMIT / ALLOC_SMALL_STEP)  // 2048 classes of 512 B steps
#define ALLOC_LARGE_STEP ((size_t)2 << 20)
#define ALLOC_LARGE_CLASS ALLOC_SMALL_CLASSES  // every block above 1 MiB
#define ALLOC_CLASSES (ALLOC_SMALL_CLASSES + 1)
#define ALLOC_BUCKETS 4096  // hash buckets for the blocks held by the caller

typedef struct Block {
    void *ptr;           // device memory from cudaMalloc
    size_t size;         // its class size in bytes
    int cls;             // its size class
    int graph;           // a captured graph may read or write it: never handed to anyone else
    struct Block *next;  // the next block in its free list, hash bucket or the graphs' list
} Block;

struct CudaAllocator {
    pthread_mutex_t lock;             // the loader thread may allocate while the trainer does
    Block *free_list[ALLOC_CLASSES];  // cached blocks per class
    Block *held[ALLOC_BUCKETS];       // blocks handed out, by pointer hash
    Block *graph_kept;                // blocks the graphs use that their holder gave back
    int capturing;                    // between cuda_alloc_capture_begin and _end
    int graphs;                       // live graphs
    size_t current, peak, reserved;
};

// The class of a request and its rounded size.
static int alloc_class(size_t bytes, size_t *rounded) {
    if (bytes <= ALLOC_SMALL_LIMIT) {
        size_t r = bytes == 0 ? ALLOC_SMALL_STEP
                              : (bytes + ALLOC_SMALL_STEP - 1) / ALLOC_SMALL_STEP * ALLOC_SMALL_STEP;
        *rounded = r;
        return (int)(r / ALLOC_SMALL_STEP) - 1;
    }
    *rounded = (bytes + ALLOC_LARGE_STEP - 1) / ALLOC_LARGE_STEP * ALLOC_LARGE_STEP;
    return ALLOC_LARGE_CLASS;
}

static size_t alloc_bucket(const void *ptr) {
    return (size_t)(((uintptr_t)ptr >> 9) * 0x9E3779B97F4A7C15ull >> 52) % ALLOC_BUCKETS;
}

// Gives every cached block back to the driver (only when cudaMalloc failed, or at destroy).
static void alloc_release_cached(CudaAllocator *a) {
    for (int c = 0; c < ALLOC_CLASSES; c++) {
        while (a->free_list[c]) {
            Block *b = a->free_list[c];
            a->free_list[c] = b->next;
            CUDA_CHECK(cudaFree(b->ptr));
            a->reserved -= b->size;
            free(b);
        }
    }
}

static Block *alloc_fresh_block(CudaAllocator *a, size_t rounded, int cls) {
    void *ptr = NULL;
    cudaError_t err = cudaMalloc(&ptr, rounded);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // not sticky, but it would be reported by the next launch check
        alloc_release_cached(a);
        err = cudaMalloc(&ptr, rounded);
    }
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        amp_fatal(__FILE__, __LINE__,
                  "cudaMalloc of %zu bytes failed: %s (allocated %zu, reserved %zu bytes)", rounded,
                  cudaGetErrorString(err), a->current, a->reserved);
    }
    Block *b = (Block *)xcalloc(1, sizeof(Block));
    b->ptr = ptr;
    b->size = rounded;
    b->cls = cls;
    a->reserved += rounded;
    return b;
}

CudaAllocator *cuda_alloc_create(void) {
    CudaAllocator *a = (CudaAllocator *)xcalloc(1, sizeof(CudaAllocator));
    AMP_ASSERT(pthread_mutex_init(&a->lock, NULL) == 0, "cuda allocator: pthread_mutex_init failed");
    return a;
}

void cuda_alloc_destroy(CudaAllocator *a) {
    if (!a) return;
    for (int i = 0; i < ALLOC_BUCKETS; i++) {
        while (a->held[i]) {
            Block *b = a->held[i];
            a->held[i] = b->next;
            CUDA_CHECK(cudaFree(b->ptr));
            free(b);
        }
    }
    while (a->graph_kept) {
        Block *b = a->graph_kept;
        a->graph_kept = b->next;
        CUDA_CHECK(cudaFree(b->ptr));
        free(b);
    }
    alloc_release_cached(a);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

void *cuda_alloc_get(CudaAllocator *a, size_t bytes) {
    size_t rounded;
    const int cls = alloc_class(bytes, &rounded);
    pthread_mutex_lock(&a->lock);
    Block **link = &a->free_list[cls];
    while (*link && (*link)->size != rounded) link = &(*link)->next;  // small classes: the head matches
    Block *b = *link;
    if (b)
        *link = b->next;
    else
        b = alloc_fresh_block(a, rounded, cls);
    if (a->capturing) b->graph = 1;
    const size_t h = alloc_bucket(b->ptr);
    b->next = a->held[h];
    a->held[h] = b;
    a->current += b->size;
    if (a->current > a->peak) a->peak = a->current;
    pthread_mutex_unlock(&a->lock);
    return b->ptr;
}

void cuda_alloc_put(CudaAllocator *a, void *ptr) {
    if (!ptr) return;
    pthread_mutex_lock(&a->lock);
    Block **link = &a->held[alloc_bucket(ptr)];
    while (*link && (*link)->ptr != ptr) link = &(*link)->next;
    if (!*link) {
        pthread_mutex_unlock(&a->lock);
        amp_fatal(__FILE__, __LINE__, "cuda allocator: free of %p, which it did not hand out", ptr);
    }
    Block *b = *link;
    *link = b->next;
    if (b->graph && !a->capturing) {  // the graphs still use it: it stays theirs (and counted)
        b->next = a->graph_kept;
        a->graph_kept = b;
    } else {  // during a capture, later captured work reuses it in stream order, as eager work would
        b->next = a->free_list[b->cls];
        a->free_list[b->cls] = b;
        a->current -= b->size;
    }
    pthread_mutex_unlock(&a->lock);
}

// Every block held now may be baked into the graph (the arena, the workspace, the parameters): mark
// them, so giving one back later does not make it anyone else's.
void cuda_alloc_capture_begin(CudaAllocator *a) {
    pthread_mutex_lock(&a->lock);
    a->capturing = 1;
    for (int i = 0; i < ALLOC_BUCKETS; i++)
        for (Block *b = a->held[i]; b; b = b->next) b->graph = 1;
    pthread_mutex_unlock(&a->lock);
}

// Blocks the capture handed out and took back (scratch of accumulating convolutions) are the graph's.
void cuda_alloc_capture_end(CudaAllocator *a) {
    pthread_mutex_lock(&a->lock);
    a->capturing = 0;
    a->graphs++;
    for (int c = 0; c < ALLOC_CLASSES; c++) {
        Block **link = &a->free_list[c];
        while (*link) {
            Block *b = *link;
            if (!b->graph) {
                link = &b->next;
                continue;
            }
            *link = b->next;
            b->next = a->graph_kept;
            a->graph_kept = b;
            a->current += b->size;
        }
    }
    pthread_mutex_unlock(&a->lock);
}

// After the last graph is gone its blocks are ordinary again.
void cuda_alloc_graph_destroyed(CudaAllocator *a) {
    pthread_mutex_lock(&a->lock);
    if (--a->graphs == 0) {
        while (a->graph_kept) {
            Block *b = a->graph_kept;
            a->graph_kept = b->next;
            b->graph = 0;
            b->next = a->free_list[b->cls];
            a->free_list[b->cls] = b;
            a->current -= b->size;
        }
        for (int i = 0; i < ALLOC_BUCKETS; i++)
            for (Block *b = a->held[i]; b; b = b->next) b->graph = 0;
    }
    pthread_mutex_unlock(&a->lock);
}

size_t cuda_alloc_current_bytes(const CudaAllocator *a) { return a->current; }
size_t cuda_alloc_peak_bytes(const CudaAllocator *a) { return a->peak; }
