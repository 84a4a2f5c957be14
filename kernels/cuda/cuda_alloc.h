// cuda_alloc.h - the CUDA backend's caching device allocator.
//
// cudaMalloc and cudaFree synchronise the device and cost tens of microseconds, so a training step
// must not call them. Blocks are rounded up to a size class and, when freed, kept on that class's free
// list for the next request of the same class; after the first step every allocation is a list pop.
// Rule (checked by who allocates, see activations.h): blocks from this allocator are touched only by the
// compute stream, so a block freed after its last kernel was enqueued can be handed out again at once:
// the next user's kernels are queued behind the last one. Memory another stream touches (the copy
// stream's input slots, the gradients NCCL sums) is allocated once and kept for the whole run.
#ifndef AMPTRAIN_CUDA_ALLOC_H
#define AMPTRAIN_CUDA_ALLOC_H

#include <stddef.h>

typedef struct CudaAllocator CudaAllocator;

CudaAllocator *cuda_alloc_create(void);
// Returns every cached block to the driver; blocks still held by the caller are freed too.
void cuda_alloc_destroy(CudaAllocator *a);

// A device block of at least `bytes` (256-byte aligned, never NULL; ends the job when the device is
// out of memory even after the cache was emptied).
void *cuda_alloc_get(CudaAllocator *a, size_t bytes);
// Returns a block from cuda_alloc_get to its free list (NULL is ignored).
void cuda_alloc_put(CudaAllocator *a, void *ptr);

// CUDA graphs bake addresses in. Between capture_begin and capture_end, blocks given back are reused by
// later captured work (stream order holds inside the graph); at capture_end those blocks, and every block
// held at capture_begin once its holder gives it back, stay the graphs' until graph_destroyed has been
// called once per captured graph.
void cuda_alloc_capture_begin(CudaAllocator *a);
void cuda_alloc_capture_end(CudaAllocator *a);
void cuda_alloc_graph_destroyed(CudaAllocator *a);

// Bytes in blocks held by the caller (sizes rounded to their class), like torch.cuda.memory_allocated,
// and the high-water mark of that number, like torch.cuda.max_memory_allocated.
size_t cuda_alloc_current_bytes(const CudaAllocator *a);
size_t cuda_alloc_peak_bytes(const CudaAllocator *a);

#endif
