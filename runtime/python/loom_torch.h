/* loom_torch.h — the C ABI of Loom's data-parallel core, for framework bindings (loom.torch binds
 * it with ctypes, so one library serves every Python and every PyTorch version: no C++ or Python
 * ABI crosses it). Every function returns 0 on success and -1 on failure; lt_last_error() then
 * says why (per thread). Pointers are the framework's own memory: host memory for the
 * collectives, host or CUDA memory for gradients. */
#ifndef LOOM_TORCH_H
#define LOOM_TORCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lt_world lt_world;
typedef struct lt_exchange lt_exchange;
typedef struct lt_balancer lt_balancer;

const char* lt_last_error(void);

/* The ranks: MPI's world when mpirun or srun --mpi=pmix started this process, else one rank.
 * `timeout_s`: how long a collective waits for a peer before failing with the peer's rank. */
int lt_init(double timeout_s, lt_world** out);
int lt_rank(const lt_world* w);
int lt_size(const lt_world* w);
int lt_local_rank(const lt_world* w);
int lt_local_size(const lt_world* w);
/* "mpi: ring over 4 ranks" or "one process" (at most `cap` bytes with the terminating zero). */
int lt_describe(const lt_world* w, char* out, size_t cap);
/* Frees the world and ends MPI where lt_init started it. */
int lt_shutdown(lt_world* w);

/* Ends every rank of the job with `code` (MPI_Abort): after an error that leaves the ranks out of
 * step, where a clean shutdown would wait for peers that will never come. One process: nothing. */
void lt_abort(lt_world* w, int code);

/* Collectives on host memory, in place; every rank calls them in the same order. */
int lt_allreduce_sum(lt_world* w, float* data, size_t n, int half_payload);
int lt_allreduce_sum_f64(lt_world* w, double* data, size_t n);
int lt_broadcast(lt_world* w, void* data, size_t bytes, int root);
/* Chunks of uneven sizes, in place on float32 host memory of counts[0] + ... + counts[size-1]
 * elements, rank r's chunk after those of the ranks before it (a count may be 0): after
 * lt_reduce_scatter_sum_v rank r's chunk holds the sum over the ranks (the rest is undefined);
 * lt_allgather_v gives every rank every rank's chunk. Every rank passes the same counts. */
int lt_reduce_scatter_sum_v(lt_world* w, float* data, const size_t* counts);
int lt_allgather_v(lt_world* w, float* data, const size_t* counts);
/* The same on CUDA memory through NCCL. lt_device_route (collective, once: it makes the NCCL
 * communicator on GPU `gpu`) sets *nccl to 1 where this build and the ranks allow it, else 0,
 * and writes what it uses or why not into `why`; with 0 the caller stages the chunks through
 * host memory and the lt_device_ calls fail. */
int lt_device_route(lt_world* w, int gpu, int* nccl, char* why, size_t why_size);
int lt_device_reduce_scatter_sum_v(lt_world* w, float* data, const size_t* counts);
int lt_device_allgather_v(lt_world* w, float* data, const size_t* counts);

/* The gradient exchange of loom-train (runtime/comm/grad_exchange): buckets summed by a
 * communication thread while backward runs (`compress` "none" or "fp16"), or PowerSGD
 * ("powersgd:rank=R,start=S", at finish). `shapes` holds each parameter's dimensions one after
 * another, `ndims[i]` of them for parameter i; `on_cuda[i]` says where its gradient lives. A
 * parameter of more than two dimensions is, for PowerSGD, a matrix of its first dimension by
 * the rest (as PyTorch's PowerSGD hook takes it). */
int lt_exchange_new(lt_world* w, const char* compress, double bucket_mb, int n_params, const int* ndims,
                    const int64_t* shapes, const int* on_cuda, int cuda_device, lt_exchange** out);
/* Parameter i's gradient is final at `grad` (already weighted by the caller: the exchange sums).
 * Host gradients are copied into the exchange's bucket; CUDA ones are read and written where
 * they lie, so they must stay there until lt_exchange_finish returns. The first call of a step
 * starts it. */
int lt_exchange_ready(lt_exchange* x, int param, void* grad);
/* Waits for every bucket; `extras` (any per-step numbers) are summed over the ranks too. */
int lt_exchange_finish(lt_exchange* x, float* extras, size_t n_extras, int64_t step);
/* After finish: the summed gradient of a parameter whose gradient is in host memory. */
int lt_exchange_result(lt_exchange* x, int param, void* dst);
/* Bytes this rank sent in the last step, what plain fp32 would have sent, the buckets. */
int lt_exchange_stats(const lt_exchange* x, size_t* last_bytes, size_t* plain_bytes, size_t* buckets);
/* How the gradients travel: "host memory", "nccl: ..." (several ranks' CUDA gradients summed in
 * device memory), or "GPU gradients staged through host memory: <why NCCL is not used>". */
int lt_exchange_route(const lt_exchange* x, char* out, size_t cap);
void lt_exchange_free(lt_exchange* x);

/* The balancer of loom-train --balance: shares of a global batch among ranks of unequal speed.
 * mode "off", "static" (from `weights`) or "dynamic" (then from measured step times). */
int lt_balancer_new(const char* mode, int global_batch, int ranks, int replan_every, const double* weights,
                    lt_balancer** out);
int lt_balancer_shares(const lt_balancer* b, int* out);  /* `ranks` integers summing to the batch */
/* Every rank's compute seconds of the last step; *replanned is 1 when the shares changed. */
int lt_balancer_observe(lt_balancer* b, const double* seconds, int* replanned);
void lt_balancer_free(lt_balancer* b);

/* Checkpoints (loom-train's HDF5 layout, every dataset with a Fletcher32 checksum,
 * written to a temporary name, flushed and renamed). A checkpoint is built up, then saved; or
 * loaded (every checksum verified), then read out. Groups: 0 /params, 1 /optimizer/m (here: any
 * float tensor of the optimizer's state), 2 /optimizer/v. Texts: 0 model.config, 1 train.config,
 * 2 /state/json (must hold "step"), 3 /state/rng (bytes). */
typedef struct lt_checkpoint lt_checkpoint;
int lt_ckpt_new(lt_checkpoint** out);
/* Copies `data` (float32 host memory, `ndim` dimensions `shape`) in as tensor `name` of `group`. */
int lt_ckpt_add(lt_checkpoint* c, int group, const char* name, const float* data, int ndim, const int64_t* shape);
int lt_ckpt_set_text(lt_checkpoint* c, int which, const char* text, size_t len);
int lt_ckpt_save(const lt_checkpoint* c, const char* path);
int lt_ckpt_load(const char* path, lt_checkpoint** out);
int lt_ckpt_count(const lt_checkpoint* c, int group, size_t* n);
/* Tensor i of a group: its name (at most `cap` bytes), dimensions (up to 16) and values. */
int lt_ckpt_info(const lt_checkpoint* c, int group, size_t i, char* name, size_t cap, int* ndim, int64_t* shape);
int lt_ckpt_read(const lt_checkpoint* c, int group, size_t i, float* dst);
/* A text's length (*len) and, when `dst` is not null, its bytes (at most `cap`). */
int lt_ckpt_text(const lt_checkpoint* c, int which, char* dst, size_t cap, size_t* len);
void lt_ckpt_free(lt_checkpoint* c);

#ifdef __cplusplus
}
#endif

#endif
