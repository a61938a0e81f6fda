/*
 * vk_device.c - the "vulkan" device kind (device_kind.h, docs/vulkan.md): the loader (dlopen),
 * instance and device selection (MUSE_VK_DEVICE, --device N), memory, buffers, pipelines and the
 * device list of `muse info --devices`. Programs are prepared and run by vk_run.c.
 */
#include "backend/vulkan/vk.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/quant_tables.h"
#include "kernels/types.h"
#include "backend/vulkan/shaders/tab_layout.h"
#include "muse_vk_shaders.h"

/* A run that takes longer than this is taken for a hung or lost device. */
#define VK_TIMEOUT_NS (300ull * 1000000000ull)
#define STAGING_BYTES ((size_t)64 << 20)

static const char *const shader_names[SH_COUNT] = {"act_quant", "attention",      "eltwise",     "embed",
                                                   "kv_store",  "matmul",         "matmul_coopmat", "matmul_dp4a",
                                                   "matmul_f16", "matmul_vec",    "rms_norm",       "rope"};

const char *muse_vk_shader_name(enum vk_shader sh) { return (unsigned)sh < SH_COUNT ? shader_names[sh] : "?"; }

static const char *vk_result_name(VkResult r) {
    switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "out of host memory";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "out of device memory";
    case VK_ERROR_INITIALIZATION_FAILED: return "initialization failed";
    case VK_ERROR_DEVICE_LOST: return "device lost";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "incompatible driver (no Vulkan 1.2 driver found)";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "extension not present";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "feature not present";
    case VK_ERROR_LAYER_NOT_PRESENT: return "layer not present";
    case VK_TIMEOUT: return "timeout";
    default: return "error";
    }
}

// ---- the loader and the instance ----------------------------------------------------------------

/* Open the loader and an instance (Vulkan 1.2; MUSE_VK_VALIDATE=1 adds the Khronos validation layer). */
static muse_status instance_open(struct vk *v, struct muse_error *err) {
    v->lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!v->lib) v->lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (!v->lib)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "vulkan: no Vulkan loader (libvulkan.so.1) on this machine (Debian: apt-get install libvulkan1 and a driver)");
    v->fn.vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(v->lib, "vkGetInstanceProcAddr");
    if (!v->fn.vkGetInstanceProcAddr) return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: the loader has no vkGetInstanceProcAddr");
    v->fn.vkCreateInstance = (PFN_vkCreateInstance)v->fn.vkGetInstanceProcAddr(NULL, "vkCreateInstance");
    v->fn.vkEnumerateInstanceVersion = (PFN_vkEnumerateInstanceVersion)v->fn.vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceVersion");
    uint32_t api = VK_API_VERSION_1_0;
    if (v->fn.vkEnumerateInstanceVersion) v->fn.vkEnumerateInstanceVersion(&api);
    if (!v->fn.vkCreateInstance || api < VK_API_VERSION_1_2)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: the loader is older than Vulkan 1.2");
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "muse",
                                   .pEngineName = "muse", .apiVersion = VK_API_VERSION_1_2};
    const char *layers[] = {"VK_LAYER_KHRONOS_validation"};
    const char *val = getenv("MUSE_VK_VALIDATE");
    const bool validate = val && *val && strcmp(val, "0");
    const VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                                      .enabledLayerCount = validate ? 1 : 0, .ppEnabledLayerNames = layers};
    VkResult r = v->fn.vkCreateInstance(&ici, NULL, &v->inst);
    if (r != VK_SUCCESS)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: cannot create an instance: %s%s", vk_result_name(r),
                              r == VK_ERROR_LAYER_NOT_PRESENT ? " (MUSE_VK_VALIDATE needs vulkan-validationlayers)" : "");
#define LOAD(f) if (!(v->fn.f = (PFN_##f)v->fn.vkGetInstanceProcAddr(v->inst, #f))) \
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: the loader lacks %s", #f);
    VK_FNS(LOAD)
#undef LOAD
    return MUSE_OK;
}

/* The physical devices (at most 16). */
static uint32_t physical_devices(struct vk *v, VkPhysicalDevice *out) {
    uint32_t n = 16;
    if (v->fn.vkEnumeratePhysicalDevices(v->inst, &n, out) < 0) return 0;
    return n;
}

static const char *device_type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

static bool has_extension(struct vk *v, VkPhysicalDevice pd, const char *name) {
    uint32_t n = 0;
    v->fn.vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL);
    VkExtensionProperties *e = calloc(n ? n : 1, sizeof *e);
    bool found = false;
    if (e && v->fn.vkEnumerateDeviceExtensionProperties(pd, NULL, &n, e) >= 0)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(e[i].extensionName, name);
    free(e);
    return found;
}

/* pd's properties with its subgroup properties chained (into *sg). */
static VkPhysicalDeviceProperties2 props_subgroup(struct vk *v, VkPhysicalDevice pd, VkPhysicalDeviceSubgroupProperties *sg) {
    *sg = (VkPhysicalDeviceSubgroupProperties){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = sg};
    v->fn.vkGetPhysicalDeviceProperties2(pd, &p2);
    p2.pNext = NULL;
    return p2;
}

/* One line about physical device pd (index i). */
static int describe(struct vk *v, VkPhysicalDevice pd, uint32_t i, char *buf, size_t size) {
    VkPhysicalDeviceSubgroupProperties sg;
    const VkPhysicalDeviceProperties2 p2 = props_subgroup(v, pd, &sg);
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    v->fn.vkGetPhysicalDeviceFeatures2(pd, &f2);
    VkPhysicalDeviceMemoryProperties mp;
    v->fn.vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    uint64_t local = 0;
    for (uint32_t h = 0; h < mp.memoryHeapCount; h++)
        if (mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) local += mp.memoryHeaps[h].size;
    const VkPhysicalDeviceProperties *p = &p2.properties;
    const bool dot = has_extension(v, pd, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    /* muse's cooperative-matrix variant is written for VK_NV_cooperative_matrix (matmul_coopmat.comp) */
    const bool cm = has_extension(v, pd, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME),
               cmk = has_extension(v, pd, "VK_KHR_cooperative_matrix");
    return snprintf(buf, size,
                    "vulkan %u: %s (%s, Vulkan %u.%u), %.1f GiB device memory, subgroup %u, fp16 %s, int8-dot %s, "
                    "coopmat %s, buffer device address %s\n",
                    i, p->deviceName, device_type_name(p->deviceType), VK_API_VERSION_MAJOR(p->apiVersion),
                    VK_API_VERSION_MINOR(p->apiVersion), (double)local / (1 << 30), sg.subgroupSize,
                    f12.shaderFloat16 ? "yes" : "no", dot ? "yes" : "no",
                    cm ? (cmk ? "yes (NV, KHR)" : "yes (NV)") : cmk ? "no (KHR only; muse's variant needs NV)" : "no",
                    f12.bufferDeviceAddress ? "yes" : "no");
}

static void instance_close(struct vk *v) {
    if (v->inst) v->fn.vkDestroyInstance(v->inst, NULL);
    if (v->lib) dlclose(v->lib);
    v->inst = NULL;
    v->lib = NULL;
}

static int vk_list(char *buf, size_t size) {
    struct vk v = {0};
    struct muse_error e = {0};
    if (instance_open(&v, &e)) {
        snprintf(buf, size, "%s\n", e.msg);
        instance_close(&v);
        return 0;
    }
    VkPhysicalDevice pd[16];
    const uint32_t n = physical_devices(&v, pd);
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n && used < size; i++) {
        const int k = describe(&v, pd[i], i, buf + used, size - used);
        if (k > 0) used += (size_t)k;
    }
    if (n == 0) snprintf(buf, size, "vulkan: the loader found no device (no driver, or VK_ICD_FILENAMES names none)\n");
    instance_close(&v);
    return (int)n;
}

/* --backend auto: the first discrete GPU, else the first integrated one (vk_open's default order). */
static bool vk_gpu(char *buf, size_t size) {
    struct vk v = {0};
    struct muse_error e = {0};
    bool found = false;
    if (instance_open(&v, &e)) {
        snprintf(buf, size, "%s", e.msg);
        instance_close(&v);
        return false;
    }
    VkPhysicalDevice pd[16];
    const uint32_t n = physical_devices(&v, pd);
    static const VkPhysicalDeviceType order[2] = {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU};
    for (int k = 0; k < 2 && !found; k++)
        for (uint32_t i = 0; i < n && !found; i++) {
            VkPhysicalDeviceProperties p;
            v.fn.vkGetPhysicalDeviceProperties(pd[i], &p);
            if (p.deviceType != order[k] || p.apiVersion < VK_API_VERSION_1_2) continue;
            snprintf(buf, size, "%s (%s, vulkan device %u)", p.deviceName, device_type_name(p.deviceType), i);
            found = true;
        }
    if (!found)
        snprintf(buf, size, n ? "no discrete or integrated Vulkan GPU among %u device(s): muse info --devices" : "no Vulkan device", n);
    instance_close(&v);
    return found;
}

// ---- memory and buffers ------------------------------------------------------------------------

static int memory_type(struct vk *v, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) {
    int best = -1;
    for (uint32_t i = 0; i < v->memp.memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = v->memp.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (f & want) != want) continue;
        if ((f & prefer) == prefer) return (int)i;
        if (best < 0) best = (int)i;
    }
    return best;
}

muse_status muse_vk_buf_create(struct vk *v, size_t size, bool host, struct vk_buf *b, struct muse_error *err) {
    memset(b, 0, sizeof *b);
    if (size == 0) size = 4;
    const VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size, .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                 VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
    };
    VkResult r = v->fn.vkCreateBuffer(v->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS) goto fail;
    VkMemoryRequirements req;
    v->fn.vkGetBufferMemoryRequirements(v->dev, b->buf, &req);
    const int mt = host ? memory_type(v, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                      VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                        : memory_type(v, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    if (mt < 0) {
        r = VK_ERROR_FEATURE_NOT_PRESENT;
        goto fail;
    }
    const VkMemoryAllocateFlagsInfo fl = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                          .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    const VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &fl,
                                      .allocationSize = req.size, .memoryTypeIndex = (uint32_t)mt};
    if ((r = v->fn.vkAllocateMemory(v->dev, &mai, NULL, &b->mem)) != VK_SUCCESS) goto fail;
    if ((r = v->fn.vkBindBufferMemory(v->dev, b->buf, b->mem, 0)) != VK_SUCCESS) goto fail;
    if (host && (r = v->fn.vkMapMemory(v->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map)) != VK_SUCCESS) goto fail;
    const VkBufferDeviceAddressInfo ai = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = b->buf};
    b->addr = v->fn.vkGetBufferDeviceAddress(v->dev, &ai);
    b->size = size;
    return MUSE_OK;
fail:
    muse_vk_buf_destroy(v, b);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_FEATURE_NOT_PRESENT) {
        uint64_t heap = 0;
        for (uint32_t h = 0; h < v->memp.memoryHeapCount; h++)
            if (v->memp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT && v->memp.memoryHeaps[h].size > heap)
                heap = v->memp.memoryHeaps[h].size;
        return muse_error_set(err, MUSE_ERR_NOMEM, "vulkan: out of %s memory for a %.1f MiB buffer (the device has %.1f GiB)",
                              host ? "host-visible" : "device", (double)size / (1 << 20), (double)heap / (1 << 30));
    }
    return muse_error_set(err, MUSE_ERR_IO, "vulkan: cannot create a %zu-byte buffer: %s", size, vk_result_name(r));
}

void muse_vk_buf_destroy(struct vk *v, struct vk_buf *b) {
    if (b->buf) v->fn.vkDestroyBuffer(v->dev, b->buf, NULL);
    if (b->mem) v->fn.vkFreeMemory(v->dev, b->mem, NULL); /* unmaps */
    memset(b, 0, sizeof *b);
}

muse_status muse_vk_buf_ensure(struct vk *v, struct vk_buf *b, size_t size, struct muse_error *err) {
    if (b->buf && b->size >= size) return MUSE_OK;
    muse_vk_replay_clear(v); /* a recorded decode step holds the old address */
    size_t n = b->size ? b->size : 4096;
    while (n < size) n *= 2;
    muse_vk_buf_destroy(v, b);
    return muse_vk_buf_create(v, n, true, b, err);
}

void muse_vk_begin(struct vk *v) {
    v->fn.vkResetCommandPool(v->dev, v->pool, 0);
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    v->fn.vkBeginCommandBuffer(v->cb, &bi);
}

/* End the recording of v->cb with a barrier that makes the last writes visible to the host. */
void muse_vk_end(struct vk *v) {
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                                .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    v->fn.vkCmdPipelineBarrier(v->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                               VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    v->fn.vkEndCommandBuffer(v->cb);
}

muse_status muse_vk_submit_cb(struct vk *v, VkCommandBuffer cb, struct muse_error *err) {
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    VkResult r = v->fn.vkResetFences(v->dev, 1, &v->fence);
    if (r == VK_SUCCESS) r = v->fn.vkQueueSubmit(v->queue, 1, &si, v->fence);
    if (r == VK_SUCCESS) r = v->fn.vkWaitForFences(v->dev, 1, &v->fence, VK_TRUE, VK_TIMEOUT_NS);
    if (r == VK_SUCCESS) return MUSE_OK;
    v->lost = true;
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
        return muse_error_set(err, MUSE_ERR_NOMEM, "vulkan: %s while running on %s", vk_result_name(r), v->props.deviceName);
    return muse_error_set(err, MUSE_ERR_IO, "vulkan: %s on %s%s", vk_result_name(r), v->props.deviceName,
                          r == VK_TIMEOUT ? " (a run took over 300 s; the device is taken for lost)" : "");
}

muse_status muse_vk_submit(struct vk *v, struct muse_error *err) {
    muse_vk_end(v);
    return muse_vk_submit_cb(v, v->cb, err);
}

void muse_vk_barrier(struct vk *v) {
    const VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                         VK_ACCESS_TRANSFER_WRITE_BIT,
    };
    const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    v->fn.vkCmdPipelineBarrier(v->cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
}

static muse_status lost(struct vk *v, struct muse_error *err) {
    return muse_error_set(err, MUSE_ERR_IO, "vulkan: %s was lost earlier; reopen the model", v->props.deviceName);
}

muse_status muse_vk_upload(struct vk *v, VkBuffer dst, size_t off, const void *src, size_t bytes, struct muse_error *err) {
    if (v->lost) return lost(v, err);
    for (size_t done = 0; done < bytes;) {
        const size_t n = bytes - done < v->staging.size ? bytes - done : v->staging.size;
        memcpy(v->staging.map, (const char *)src + done, n);
        muse_vk_begin(v);
        const VkBufferCopy c = {.srcOffset = 0, .dstOffset = off + done, .size = n};
        v->fn.vkCmdCopyBuffer(v->cb, v->staging.buf, dst, 1, &c);
        muse_status st = muse_vk_submit(v, err);
        if (st) return st;
        done += n;
    }
    return MUSE_OK;
}

muse_status muse_vk_download(struct vk *v, VkBuffer src, size_t off, void *dst, size_t bytes, struct muse_error *err) {
    if (v->lost) return lost(v, err);
    for (size_t done = 0; done < bytes;) {
        const size_t n = bytes - done < v->staging.size ? bytes - done : v->staging.size;
        muse_vk_begin(v);
        const VkBufferCopy c = {.srcOffset = off + done, .dstOffset = 0, .size = n};
        v->fn.vkCmdCopyBuffer(v->cb, src, v->staging.buf, 1, &c);
        muse_status st = muse_vk_submit(v, err);
        if (st) return st;
        memcpy((char *)dst + done, v->staging.map, n);
        done += n;
    }
    return MUSE_OK;
}

// ---- pipelines ---------------------------------------------------------------------------------

VkPipeline muse_vk_pipeline(struct vk *v, enum vk_shader sh, uint32_t spec, struct muse_error *err) {
    for (int i = 0; i < v->n_pipes; i++)
        if (v->pipes[i].sh == sh && v->pipes[i].spec == spec) return v->pipes[i].pipe;
    if (!v->mods[sh]) {
        const struct muse_vk_spv *s = &muse_vk_shaders[sh];
        const VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = s->size,
                                              .pCode = s->words};
        VkResult r = v->fn.vkCreateShaderModule(v->dev, &mci, NULL, &v->mods[sh]);
        if (r != VK_SUCCESS) {
            muse_error_set(err, MUSE_ERR_IO, "vulkan: shader %s: %s", s->name, vk_result_name(r));
            return VK_NULL_HANDLE;
        }
    }
    /* constant 0: spec's low 16 bits, constant 1: its high 16 (a shader without constant 1 ignores it) */
    const uint32_t data[2] = {spec & 0xffff, spec >> 16};
    const VkSpecializationMapEntry me[2] = {{.constantID = 0, .offset = 0, .size = sizeof(uint32_t)},
                                            {.constantID = 1, .offset = 4, .size = sizeof(uint32_t)}};
    const VkSpecializationInfo si = {.mapEntryCount = data[1] ? 2 : 1, .pMapEntries = me, .dataSize = sizeof data, .pData = data};
    const VkComputePipelineCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = v->mods[sh], .pName = "main", .pSpecializationInfo = &si},
        .layout = v->layout,
    };
    if (v->n_pipes == v->cap_pipes) {
        const int cap = v->cap_pipes ? 2 * v->cap_pipes : 32;
        struct vk_pipe *p = realloc(v->pipes, sizeof *p * (size_t)cap);
        if (!p) {
            muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
            return VK_NULL_HANDLE;
        }
        v->pipes = p;
        v->cap_pipes = cap;
    }
    VkPipeline pipe;
    VkResult r = v->fn.vkCreateComputePipelines(v->dev, VK_NULL_HANDLE, 1, &pci, NULL, &pipe);
    if (r != VK_SUCCESS) {
        muse_error_set(err, MUSE_ERR_IO, "vulkan: pipeline %s/%u: %s", shader_names[sh], spec, vk_result_name(r));
        return VK_NULL_HANDLE;
    }
    v->pipes[v->n_pipes++] = (struct vk_pipe){sh, spec, pipe};
    return pipe;
}

// ---- the profiler (MUSE_VK_PROFILE) ----------------------------------------------------------------

void muse_vk_prof_stamp(struct vk *v, const char *label, double bytes) {
    if (!v->prof || v->q_n >= VK_PROF_QUERIES) return;
    int e = 0; /* label NULL: the run's start */
    while (label && e < v->n_pe && strcmp(v->pe[e].label, label)) e++;
    if (label && e == v->n_pe) {
        if (v->n_pe >= INT16_MAX) return;
        if (v->n_pe == v->cap_pe) {
            const int c = v->cap_pe ? 2 * v->cap_pe : 64;
            struct vk_prof_ent *pe = realloc(v->pe, sizeof *pe * (size_t)c);
            if (!pe) return;
            v->pe = pe, v->cap_pe = c;
        }
        memset(&v->pe[e], 0, sizeof v->pe[e]);
        snprintf(v->pe[e].label, sizeof v->pe[e].label, "%s", label);
        v->n_pe++;
    }
    v->q_lab[v->q_n] = (int16_t)(label ? e : -1);
    v->q_bytes[v->q_n] = bytes;
    v->fn.vkCmdWriteTimestamp(v->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, v->qp, v->q_n++);
}

void muse_vk_prof_collect(struct vk *v) {
    if (!v->prof || v->q_n < 2) return;
    static uint64_t t[VK_PROF_QUERIES];
    if (v->fn.vkGetQueryPoolResults(v->dev, v->qp, 0, v->q_n, sizeof t, t, sizeof t[0],
                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
        return;
    const double ns = v->props.limits.timestampPeriod;
    for (uint32_t i = 1; i < v->q_n; i++) {
        if (v->q_lab[i] < 0) continue;
        struct vk_prof_ent *e = &v->pe[v->q_lab[i]];
        e->ms += (double)(t[i] - t[i - 1]) * ns * 1e-6;
        e->bytes += v->q_bytes[i];
        e->calls++;
    }
    v->prof_wall_ms += (double)(t[v->q_n - 1] - t[0]) * ns * 1e-6;
    v->prof_runs++;
}

static int prof_cmp(const void *a, const void *b) {
    const struct vk_prof_ent *x = a, *y = b;
    return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : 0;
}

void muse_vk_prof_print(struct vk *v) {
    if (!v->prof || !v->n_pe) return;
    qsort(v->pe, (size_t)v->n_pe, sizeof *v->pe, prof_cmp);
    fprintf(stderr, "vulkan profile: %s, %llu runs, %.3f ms of GPU time (tg: runs of <= 8 rows, pp: longer)\n",
            v->props.deviceName, (unsigned long long)v->prof_runs, v->prof_wall_ms);
    fprintf(stderr, "%-56s %8s %11s %10s %6s %8s\n", "dispatch", "calls", "ms", "us/call", "share", "GB/s");
    for (int i = 0; i < v->n_pe; i++) {
        const struct vk_prof_ent *e = &v->pe[i];
        fprintf(stderr, "%-56s %8llu %11.3f %10.2f %5.1f%% ", e->label, (unsigned long long)e->calls, e->ms,
                e->calls ? 1e3 * e->ms / (double)e->calls : 0.0, v->prof_wall_ms > 0 ? 100.0 * e->ms / v->prof_wall_ms : 0.0);
        if (e->bytes > 0 && e->ms > 0) fprintf(stderr, "%8.1f\n", e->bytes / (e->ms * 1e6));
        else fprintf(stderr, "%8s\n", "");
    }
}

// ---- the kind ----------------------------------------------------------------------------------

static void vk_close(void *ks) {
    struct vk *v = ks;
    if (!v) return;
    muse_vk_prof_print(v);
    free(v->pe);
    if (v->dev) {
        v->fn.vkDeviceWaitIdle(v->dev);
        if (v->qp) v->fn.vkDestroyQueryPool(v->dev, v->qp, NULL);
        muse_vk_forget_all(v);
        for (int i = 0; i < v->n_pipes; i++) v->fn.vkDestroyPipeline(v->dev, v->pipes[i].pipe, NULL);
        for (int i = 0; i < SH_COUNT; i++)
            if (v->mods[i]) v->fn.vkDestroyShaderModule(v->dev, v->mods[i], NULL);
        if (v->layout) v->fn.vkDestroyPipelineLayout(v->dev, v->layout, NULL);
        muse_vk_buf_destroy(v, &v->tab);
        muse_vk_buf_destroy(v, &v->ws);
        muse_vk_buf_destroy(v, &v->xq);
        muse_vk_buf_destroy(v, &v->io);
        muse_vk_buf_destroy(v, &v->out);
        muse_vk_buf_destroy(v, &v->staging);
        if (v->fence) v->fn.vkDestroyFence(v->dev, v->fence, NULL);
        if (v->pool) v->fn.vkDestroyCommandPool(v->dev, v->pool, NULL);
        for (int i = 0; i < VK_REPLAY_SLOTS; i++)
            if (v->rp[i].pool) v->fn.vkDestroyCommandPool(v->dev, v->rp[i].pool, NULL);
        v->fn.vkDestroyDevice(v->dev, NULL);
    }
    free(v->pipes);
    free(v->bufs);
    instance_close(v);
    free(v);
}

/* The quant tables the dequantizers read (dequant.glsl), from kernels/quant_tables.c, laid out by
 * shaders/tab_layout.h. */
static muse_status upload_tables(struct vk *v, struct muse_error *err) {
    uint32_t *t = calloc(TAB_WORDS, sizeof *t);
    if (!t) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
#define GRID64(off, g, n) for (int i = 0; i < (n); i++) t[(off) + 2 * i] = (uint32_t)(g)[i], t[(off) + 2 * i + 1] = (uint32_t)((g)[i] >> 32)
    GRID64(TAB_IQ2XXS, muse_iq2xxs_grid, 256);
    GRID64(TAB_IQ2XS, muse_iq2xs_grid, 512);
    GRID64(TAB_IQ2S, muse_iq2s_grid, 1024);
    GRID64(TAB_IQ1S, muse_iq1s_grid, 2048);
#undef GRID64
    for (int i = 0; i < 128; i++) t[TAB_KSIGNS + i] = muse_ksigns_iq2xs[i];
    for (int i = 0; i < 16; i++) t[TAB_IQ4NL + i] = (uint32_t)(int32_t)muse_kvalues_iq4nl[i];
    for (int i = 0; i < 16; i++) t[TAB_MXFP4 + i] = (uint32_t)(int32_t)muse_kvalues_mxfp4[i];
    for (int i = 0; i < 256; i++) t[TAB_IQ3XXS + i] = muse_iq3xxs_grid[i];
    for (int i = 0; i < 512; i++) t[TAB_IQ3S + i] = muse_iq3s_grid[i];
    muse_status st = muse_vk_buf_create(v, TAB_WORDS * sizeof *t, false, &v->tab, err);
    if (!st) st = muse_vk_upload(v, v->tab.buf, 0, t, TAB_WORDS * sizeof *t, err);
    free(t);
    return st;
}

/* Whether the device's NV cooperative matrices have the shape matmul_coopmat.comp uses: 16 x 16
 * x 16, f16 A and B, f32 C and D, subgroup scope. */
static bool coopmat_shape(struct vk *v) {
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV get =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)v->fn.vkGetInstanceProcAddr(v->inst,
                                                                                          "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    uint32_t n = 0;
    if (!get || get(v->phys, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkCooperativeMatrixPropertiesNV *p = calloc(n, sizeof *p);
    bool ok = false;
    for (uint32_t i = 0; p && i < n; i++) p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    if (p && get(v->phys, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !ok; i++)
            ok = p[i].MSize == 16 && p[i].NSize == 16 && p[i].KSize == 16 && p[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                 p[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV && p[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                 p[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV && p[i].scope == VK_SCOPE_SUBGROUP_NV;
    free(p);
    return ok;
}

static muse_status vk_open(int32_t n_threads, bool no_repack, void **ks, struct muse_error *err) {
    (void)n_threads, (void)no_repack;
    muse_status st;
    struct vk *v = calloc(1, sizeof *v);
    if (!v) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    _Static_assert(sizeof muse_vk_shaders / sizeof muse_vk_shaders[0] == SH_COUNT, "one module per enum vk_shader");
    for (int i = 0; i < SH_COUNT; i++)
        if (strcmp(muse_vk_shaders[i].name, shader_names[i])) {
            st = muse_error_set(err, MUSE_ERR_INTERNAL, "vulkan: shader table out of order (%s)", muse_vk_shaders[i].name);
            goto fail;
        }
    if ((st = instance_open(v, err))) goto fail;
    VkPhysicalDevice pd[16];
    const uint32_t n = physical_devices(v, pd);
    if (n == 0) {
        st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: no Vulkan device found (no driver, or VK_ICD_FILENAMES names none)");
        goto fail;
    }
    const char *env = getenv("MUSE_VK_DEVICE");
    long want = 0;
    if (env && *env) {
        char *end;
        want = strtol(env, &end, 10);
        if (*end || want < 0) {
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "vulkan: MUSE_VK_DEVICE='%s' is not a device number", env);
            goto fail;
        }
    } else { /* the first discrete GPU, else the first integrated one, else device 0 */
        want = -1;
        for (uint32_t i = 0; i < n && want < 0; i++) {
            v->fn.vkGetPhysicalDeviceProperties(pd[i], &v->props);
            if (v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) want = i;
        }
        for (uint32_t i = 0; i < n && want < 0; i++) {
            v->fn.vkGetPhysicalDeviceProperties(pd[i], &v->props);
            if (v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU) want = i;
        }
        if (want < 0) want = 0;
    }
    if (want >= (long)n) {
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "vulkan: no device %ld (there %s %u: muse info --devices)", want,
                            n == 1 ? "is" : "are", n);
        goto fail;
    }
    v->phys = pd[want];
    v->fn.vkGetPhysicalDeviceProperties(v->phys, &v->props);
    v->fn.vkGetPhysicalDeviceMemoryProperties(v->phys, &v->memp);
    snprintf(v->desc, sizeof v->desc, "vulkan: %s (device %ld)", v->props.deviceName, want);
    /* matmul threads per output row: a CPU driver runs a workgroup as SIMD lanes (no barriers
     * wanted), a GPU shares a row among a subgroup's worth of threads */
    v->mm_tpr = v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 1 : 32;
    const char *tpr = getenv("MUSE_VK_TPR");
    if (tpr && (atoi(tpr) == 1 || atoi(tpr) == 2 || atoi(tpr) == 4 || atoi(tpr) == 8 || atoi(tpr) == 16 ||
                atoi(tpr) == 32 || atoi(tpr) == 64))
        v->mm_tpr = (uint32_t)atoi(tpr);
    if (v->props.apiVersion < VK_API_VERSION_1_2) {
        st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: %s supports only Vulkan %u.%u (muse needs 1.2)",
                            v->props.deviceName, VK_API_VERSION_MAJOR(v->props.apiVersion), VK_API_VERSION_MINOR(v->props.apiVersion));
        goto fail;
    }
    /* the features of the fast matmul variants (docs/vulkan.md "Fast variants"), chained only when
     * the device has their extensions */
    const bool has_dot = has_extension(v, v->phys, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    const bool has_cm = has_extension(v, v->phys, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    VkPhysicalDeviceShaderIntegerDotProductFeatures fdot = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV fcm = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    void **tail = &f12.pNext;
    if (has_dot) *tail = &fdot, tail = &fdot.pNext;
    if (has_cm) *tail = &fcm, tail = &fcm.pNext;
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    v->fn.vkGetPhysicalDeviceFeatures2(v->phys, &f2);
    v->can_f16 = f12.shaderFloat16;
    v->can_dot = has_dot && fdot.shaderIntegerDotProduct;
    v->can_cm = has_cm && fcm.cooperativeMatrix && f12.shaderFloat16 && f12.vulkanMemoryModel && coopmat_shape(v);
    /* matmul_vec.comp reduces a row's 32 lanes with subgroupAdd when a subgroup divides them */
    VkPhysicalDeviceSubgroupProperties sgp;
    props_subgroup(v, v->phys, &sgp);
    v->sg = (sgp.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && (sgp.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                    sgp.subgroupSize >= 2 && sgp.subgroupSize <= 32 && 32 % sgp.subgroupSize == 0
                ? sgp.subgroupSize
                : 0;
    if (!f12.bufferDeviceAddress) {
        st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: %s has no bufferDeviceAddress (muse's shaders need it)",
                            v->props.deviceName);
        goto fail;
    }
    uint32_t nq = 16;
    VkQueueFamilyProperties qf[16];
    v->fn.vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nq, qf);
    v->qfam = UINT32_MAX;
    for (uint32_t i = 0; i < nq && v->qfam == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) v->qfam = i;
    if (v->qfam == UINT32_MAX) {
        st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: %s has no compute queue", v->props.deviceName);
        goto fail;
    }
    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = v->qfam,
                                         .queueCount = 1, .pQueuePriorities = &prio};
    VkPhysicalDeviceShaderIntegerDotProductFeatures edot = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
                                                            .shaderIntegerDotProduct = VK_TRUE};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV ecm = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
                                                       .cooperativeMatrix = VK_TRUE};
    VkPhysicalDeviceVulkan12Features en12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                             .bufferDeviceAddress = VK_TRUE, .shaderFloat16 = v->can_f16,
                                             .vulkanMemoryModel = v->can_cm};
    const char *exts[2];
    uint32_t n_ext = 0;
    tail = &en12.pNext;
    if (v->can_dot) exts[n_ext++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME, *tail = &edot, tail = &edot.pNext;
    if (v->can_cm) exts[n_ext++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME, *tail = &ecm, tail = &ecm.pNext;
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &en12, .queueCreateInfoCount = 1,
                                    .pQueueCreateInfos = &qci, .enabledExtensionCount = n_ext, .ppEnabledExtensionNames = exts};
    VkResult r = v->fn.vkCreateDevice(v->phys, &dci, NULL, &v->dev);
    if (r != VK_SUCCESS) {
        v->dev = NULL;
        st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: cannot open %s: %s", v->props.deviceName, vk_result_name(r));
        goto fail;
    }
    v->fn.vkGetDeviceQueue(v->dev, v->qfam, 0, &v->queue);
    const VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = v->qfam};
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    const VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = 128};
    const VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                            .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr};
    if ((r = v->fn.vkCreateCommandPool(v->dev, &cpi, NULL, &v->pool)) != VK_SUCCESS ||
        (r = v->fn.vkCreateFence(v->dev, &fci, NULL, &v->fence)) != VK_SUCCESS ||
        (r = v->fn.vkCreatePipelineLayout(v->dev, &pli, NULL, &v->layout)) != VK_SUCCESS) {
        st = muse_error_set(err, MUSE_ERR_IO, "vulkan: %s: %s", v->props.deviceName, vk_result_name(r));
        goto fail;
    }
    const VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = v->pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    if ((r = v->fn.vkAllocateCommandBuffers(v->dev, &cai, &v->cb)) != VK_SUCCESS) {
        st = muse_error_set(err, MUSE_ERR_IO, "vulkan: %s: %s", v->props.deviceName, vk_result_name(r));
        goto fail;
    }
    if ((st = muse_vk_buf_create(v, STAGING_BYTES, true, &v->staging, err))) goto fail;
    if ((st = upload_tables(v, err))) goto fail;
    const char *prof = getenv("MUSE_VK_PROFILE");
    if (prof && *prof && strcmp(prof, "0")) {
        const VkQueryPoolCreateInfo qpi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                           .queryCount = VK_PROF_QUERIES};
        if (!qf[v->qfam].timestampValidBits || v->fn.vkCreateQueryPool(v->dev, &qpi, NULL, &v->qp) != VK_SUCCESS)
            fprintf(stderr, "vulkan: %s has no timestamps on its compute queue: MUSE_VK_PROFILE ignored\n", v->props.deviceName);
        else
            v->prof = true;
    }
    *ks = v;
    return MUSE_OK;
fail:
    vk_close(v);
    return st;
}

static muse_status vk_reserve(void *ks, const struct muse_backend_plan *need, size_t workspace_floats,
                              struct muse_error *err) {
    struct vk *v = ks;
#define GROW(f) if (need->f > v->plan.f) v->plan.f = need->f
    GROW(n_batch);
    GROW(max_ne0);
    GROW(max_cells);
    GROW(max_head_dim);
#undef GROW
    if (need->max_head_dim > 512)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: head size %d (the attention shader takes up to 512)",
                              need->max_head_dim);
    const size_t xq_bytes = (size_t)v->plan.n_batch * (size_t)v->plan.max_ne0 * sizeof(float);
    muse_status st;
    if (xq_bytes > v->xq.size) {
        struct vk_buf xq;
        if ((st = muse_vk_buf_create(v, xq_bytes, false, &xq, err))) return st;
        muse_vk_buf_destroy(v, &v->xq);
        v->xq = xq;
        muse_vk_replay_clear(v);
    }
    if (workspace_floats * sizeof(float) <= v->ws.size) return MUSE_OK;
    struct vk_buf ws;
    st = muse_vk_buf_create(v, workspace_floats * sizeof(float), false, &ws, err);
    if (st) return st;
    muse_vk_buf_destroy(v, &v->ws);
    v->ws = ws;
    muse_vk_replay_clear(v);
    return MUSE_OK;
}

static const struct muse_backend_plan *vk_plan(void *ks) { return &((struct vk *)ks)->plan; }

static muse_status vk_check_kv(void *ks, enum muse_type type, struct muse_error *err) {
    (void)ks;
    if (type == MUSE_TYPE_F16 || type == MUSE_TYPE_F32 || type == MUSE_TYPE_Q8_0) return MUSE_OK;
    return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: a %s KV cache is not supported (use --kv f16, f32 or q8_0)",
                          muse_type_layouts[type].name ? muse_type_layouts[type].name : "?");
}

static muse_status vk_alloc(void *ks, struct muse_buffer *b, struct muse_error *err) {
    struct vk *v = ks;
    if (v->lost) return lost(v, err);
    struct vk_buf *vb = calloc(1, sizeof *vb);
    if (!vb) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    if (v->n_bufs == v->cap_bufs) {
        const int cap = v->cap_bufs ? 2 * v->cap_bufs : 16;
        struct muse_buffer **p = realloc(v->bufs, sizeof *p * (size_t)cap);
        if (!p) {
            free(vb);
            return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        }
        v->bufs = p;
        v->cap_bufs = cap;
    }
    muse_status st = muse_vk_buf_create(v, (b->size + 3) & ~(size_t)3, false, vb, err);
    if (!st) { /* zeroed, as muse_device_alloc promises */
        muse_vk_begin(v);
        v->fn.vkCmdFillBuffer(v->cb, vb->buf, 0, VK_WHOLE_SIZE, 0);
        st = muse_vk_submit(v, err);
    }
    if (st) {
        muse_vk_buf_destroy(v, vb);
        free(vb);
        return st;
    }
    b->handle = vb;
    v->bufs[v->n_bufs++] = b;
    return MUSE_OK;
}

static void vk_buffer_free(void *ks, struct muse_buffer *b) {
    struct vk *v = ks;
    muse_vk_replay_clear(v);
    for (int i = 0; i < v->n_bufs; i++)
        if (v->bufs[i] == b) {
            v->bufs[i] = v->bufs[--v->n_bufs];
            break;
        }
    if (!v->lost) v->fn.vkDeviceWaitIdle(v->dev);
    muse_vk_buf_destroy(v, b->handle);
    free(b->handle);
    b->handle = NULL;
}

/* Buffer ops between runs: a failure marks the device lost (the next run reports it). */
static void vk_buffer_zero(void *ks, struct muse_buffer *b, size_t off, size_t bytes) {
    struct vk *v = ks;
    struct muse_error e = {0};
    if (v->lost) return;
    const struct vk_buf *vb = b->handle;
    /* vkCmdFillBuffer takes whole words: the KV arrays it clears are word-aligned */
    const size_t lo = off & ~(size_t)3, hi = (off + bytes + 3) & ~(size_t)3;
    muse_vk_begin(v);
    v->fn.vkCmdFillBuffer(v->cb, vb->buf, lo, hi - lo < vb->size - lo ? hi - lo : vb->size - lo, 0);
    muse_vk_submit(v, &e);
}

static void vk_buffer_read(void *ks, struct muse_buffer *b, size_t off, void *dst, size_t bytes) {
    struct vk *v = ks;
    struct muse_error e = {0};
    if (muse_vk_download(v, ((struct vk_buf *)b->handle)->buf, off, dst, bytes, &e)) memset(dst, 0, bytes);
}

static void vk_buffer_write(void *ks, struct muse_buffer *b, size_t off, const void *src, size_t bytes) {
    struct vk *v = ks;
    struct muse_error e = {0};
    muse_vk_upload(v, ((struct vk_buf *)b->handle)->buf, off, src, bytes, &e);
}

static const char *vk_describe(void *ks) { return ((struct vk *)ks)->desc; }

const struct muse_device_kind muse_device_kind_vulkan = {
    .name = "vulkan",
    .own_memory = true,
    .open = vk_open,
    .close = vk_close,
    .reserve = vk_reserve,
    .plan = vk_plan,
    .prepare = muse_vk_prepare,
    .forget = muse_vk_forget,
    .run = muse_vk_run,
    .check_kv = vk_check_kv,
    .alloc = vk_alloc,
    .buffer_free = vk_buffer_free,
    .buffer_zero = vk_buffer_zero,
    .buffer_read = vk_buffer_read,
    .buffer_write = vk_buffer_write,
    .list = vk_list,
    .stats = muse_vk_stats,
    .gpu = vk_gpu,
    .describe = vk_describe,
};
