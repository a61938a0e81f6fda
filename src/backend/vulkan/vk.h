/*
 * vk.h - the Vulkan device's internals (src/backend/vulkan/, docs/vulkan.md), shared by
 * vk_device.c (loader, instance, device, buffers, the kind's table) and vk_run.c (programs:
 * prepare = check + upload, run = record + submit + read back).
 *
 * The loader is opened at run time (dlopen "libvulkan.so.1"), so a machine without it gets one
 * line instead of a binary that does not start; every entry point is fetched into `struct vk_fn`.
 * One device, one compute queue, one command buffer and one fence: runs are serialized by
 * device.c's lock and are synchronous (submit, wait, read back).
 */
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/device_kind.h"

#define VK_FNS(X)                                                                                  \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)           \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2)                              \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties)             \
    X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)               \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)                    \
    X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory)     \
    X(vkMapMemory) X(vkGetBufferDeviceAddress) X(vkCreateCommandPool) X(vkDestroyCommandPool)      \
    X(vkAllocateCommandBuffers) X(vkResetCommandPool) X(vkBeginCommandBuffer)                      \
    X(vkEndCommandBuffer) X(vkCmdBindPipeline) X(vkCmdPushConstants) X(vkCmdDispatch)              \
    X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer) X(vkCmdFillBuffer) X(vkQueueSubmit)                 \
    X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences)                         \
    X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreatePipelineLayout)                     \
    X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline)                    \
    X(vkDeviceWaitIdle) X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkCmdResetQueryPool)           \
    X(vkCmdWriteTimestamp) X(vkGetQueryPoolResults)

struct vk_fn {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    PFN_vkCreateInstance vkCreateInstance;
    PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion;
#define VK_FN_FIELD(f) PFN_##f f;
    VK_FNS(VK_FN_FIELD)
#undef VK_FN_FIELD
};

/* A VkBuffer with its own memory; map: the host mapping (host-visible buffers) or NULL. */
struct vk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceAddress addr;
    size_t size;
    void *map;
};

/* The shaders (the embedded modules, in this order: vk_device.c checks the names). */
enum vk_shader {
    SH_ACT_QUANT, SH_ATTENTION, SH_ELTWISE, SH_EMBED, SH_KV_STORE, SH_MATMUL, SH_MATMUL_COOPMAT, SH_MATMUL_DP4A, SH_MATMUL_F16,
    SH_MATMUL_VEC, SH_RMS_NORM, SH_ROPE, SH_COUNT
};
/* eltwise.comp's OP */
enum { EW_SWIGLU, EW_ADD, EW_LOGITS, EW_COPY };

struct vk_pipe {
    enum vk_shader sh;
    uint32_t spec;
    VkPipeline pipe;
};

struct vk_prog; /* vk_run.c: a prepared program */

/* A recorded decode step (vk_run.c, docs/vulkan.md "Persistent decode"): its command buffer (its
 * own pool, created on first use) and the shape it was recorded for. */
#define VK_REPLAY_SLOTS 8
#define VK_REPLAY_KEY 80
struct vk_replay {
    VkCommandPool pool;
    VkCommandBuffer cb;
    uint64_t key[VK_REPLAY_KEY];
    size_t n;
    bool valid;                     /* false after anything its recording baked in moved */
    uint64_t used;                  /* the tick of its last use (the least recent is recorded over) */
};

/* MUSE_VK_PROFILE=1 (docs/vulkan.md "Profiling"): GPU time per dispatch label, summed over the
 * device's life and printed to stderr when it closes. */
#define VK_PROF_QUERIES 4096
struct vk_prof_ent {
    char label[56];
    double ms;
    double bytes;       /* weight bytes read (matmuls): GB/s in the table */
    uint64_t calls;
};

struct vk {
    struct vk_fn fn;
    void *lib;
    VkInstance inst;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties memp;
    char desc[300];                 /* "vulkan: NAME (device N)" */
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    VkPipelineLayout layout;
    VkShaderModule mods[SH_COUNT];
    struct vk_pipe *pipes;
    int n_pipes, cap_pipes;
    struct vk_buf tab;              /* the quant tables (iq2xxs grid, ksigns, iq4nl) */
    struct vk_buf ws;               /* the workspace (device-local) */
    struct vk_buf xq;               /* a matmul's activations in its weight type's format (act_quant.comp) */
    struct vk_buf io;               /* per-run inputs (host-visible) */
    struct vk_buf out;              /* per-run outputs (host-visible, cached when possible) */
    struct vk_buf staging;          /* uploads and buffer reads / writes */
    struct muse_backend_plan plan;
    struct muse_buffer **bufs;      /* the device's muse_buffers (KV pointers resolve through them) */
    int n_bufs, cap_bufs;
    struct vk_prog *progs;          /* prepared programs (a list) */
    struct vk_wset *wsets;          /* uploaded weights, shared by the programs that read them (vk_run.c) */
    uint64_t weight_bytes;          /* resident in the weight sets */
    uint64_t weight_uploads;        /* weight sets uploaded since the device was opened */
    bool lost;                      /* a submission failed or timed out: every later call fails */
    /* the persistent decode steps (vk_run.c): command buffers recorded once per shape and replayed */
    struct vk_replay rp[VK_REPLAY_SLOTS];
    uint64_t rp_tick;
    uint64_t replays, records;
    uint32_t mm_tpr;                /* matmul.comp's TPR (MUSE_VK_TPR overrides) */
    /* the fast matmul variants the device can run (features enabled at creation) */
    bool can_f16, can_dot, can_cm;
    uint32_t sg;                    /* matmul_vec.comp's SG: the subgroup size when it divides 32 and has subgroupAdd, else 0 */
    /* the profiler (MUSE_VK_PROFILE): a timestamp after each dispatch of a run, labelled */
    bool prof;
    VkQueryPool qp;
    uint32_t q_n;                   /* timestamps written in the run being recorded */
    int16_t q_lab[VK_PROF_QUERIES]; /* the entry of the dispatch that ends at timestamp i */
    double q_bytes[VK_PROF_QUERIES];
    struct vk_prof_ent *pe;
    int n_pe, cap_pe;
    uint64_t prof_runs;
    double prof_wall_ms;
};

/* vk_device.c */
muse_status muse_vk_buf_create(struct vk *v, size_t size, bool host, struct vk_buf *b, struct muse_error *err);
void muse_vk_buf_destroy(struct vk *v, struct vk_buf *b);
/* Make a host-visible buffer at least `size` bytes (contents lost when it grows). */
muse_status muse_vk_buf_ensure(struct vk *v, struct vk_buf *b, size_t size, struct muse_error *err);
/* Begin recording the command buffer / submit it and wait for it (IO on a lost device or a timeout). */
void muse_vk_begin(struct vk *v);
muse_status muse_vk_submit(struct vk *v, struct muse_error *err);
/* muse_vk_submit in two: end v->cb's recording; submit a recorded command buffer and wait. */
void muse_vk_end(struct vk *v);
muse_status muse_vk_submit_cb(struct vk *v, VkCommandBuffer cb, struct muse_error *err);
/* Copy bytes between a device buffer and host memory through the staging buffer (synchronous). */
muse_status muse_vk_upload(struct vk *v, VkBuffer dst, size_t off, const void *src, size_t bytes, struct muse_error *err);
muse_status muse_vk_download(struct vk *v, VkBuffer src, size_t off, void *dst, size_t bytes, struct muse_error *err);
/* The pipeline of shader sh with specialization constants 0 = spec & 0xffff and 1 = spec >> 16
 * (when nonzero), built on first use. */
VkPipeline muse_vk_pipeline(struct vk *v, enum vk_shader sh, uint32_t spec, struct muse_error *err);
/* A full compute -> compute (and transfer) memory barrier in the command buffer. */
void muse_vk_barrier(struct vk *v);

/* vk_run.c */
muse_status muse_vk_prepare(void *ks, struct muse_program *p, struct muse_error *err);
void muse_vk_forget(void *ks, const struct muse_program *p);
muse_status muse_vk_run(void *ks, const struct muse_program *p, const struct muse_prog_run *run, struct muse_error *err);
void muse_vk_forget_all(struct vk *v);
/* The profiler: stamp the end of a dispatch with its label (and the weight bytes it read); after a
 * run's wait, add its timestamps into the table; print the table (at close). */
const char *muse_vk_shader_name(enum vk_shader sh);
void muse_vk_prof_stamp(struct vk *v, const char *label, double bytes);
void muse_vk_prof_collect(struct vk *v);
void muse_vk_prof_print(struct vk *v);
/* Drop every recorded decode step (an address it baked in moved). */
void muse_vk_replay_clear(struct vk *v);
void muse_vk_stats(void *ks, struct muse_device_stats *s);
