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

/* The gradient exchange of loom-train (runtime/dist/grad_exchange): buckets summed by a
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
void lt_exchange_free(lt_exchange* x);

/* The balancer of loom-train --balance: shares of a global batch among ranks of unequal speed.
 * mode "off", "static" (from `weights`) or "dynamic" (then from measured step times). */
int lt_balancer_new(const char* mode, int global_batch, int ranks, int replan_every, const double* weights,
                    lt_balancer** out);
int lt_balancer_shares(const lt_balancer* b, int* out);  /* `ranks` integers summing to the batch */
/* Every rank's compute seconds of the last step; *replanned is 1 when the shares changed. */
int lt_balancer_observe(lt_balancer* b, const double* seconds, int* replanned);
void lt_balancer_free(lt_balancer* b);

#ifdef __cplusplus
}
#endif

#endif
