// VK_LAYER_VKBLAS_stats: a Vulkan layer that reports how the driver compiled each compute pipeline.
//
// It enables VK_KHR_pipeline_executable_properties on the device (where the driver has it), creates every compute
// pipeline with VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR, and appends one JSON line per executable to the file
// $VKSTATS_OUT: the driver's statistics (on NVIDIA: registers, local memory, shared memory, code size). wgpu does
// not expose the extension; a layer sees every call the application makes. Used by benchmarks/kernel_stats.py,
// which builds it (gcc, the Vulkan headers) and loads it through VK_LAYER_PATH / VK_INSTANCE_LAYERS.
//
// Lines: {"device": 1, "supported": 0|1} once per device, then {"pipeline": N, "executable": "CS",
// "subgroup": 32, "stats": {"Register Count": 235, ...}} per executable. $VKSTATS_SPIRV_DIR: also write each
// shader module's SPIR-V there (modNNNN.spv, for spirv-dis). $VKSTATS_CACHE_DIR: also compile each pipeline once
// more into a pipeline cache of its own and write that cache's data there (pipeNNNN.bin, NNNN the "pipeline" number:
// on NVIDIA the compiled machine code, which kernel_stats.py --sass extracts).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#define EXPORT __attribute__((visibility("default")))
#define EXT VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME

static PFN_vkGetInstanceProcAddr next_gipa;
static PFN_vkGetDeviceProcAddr next_gdpa;
static PFN_vkCreateComputePipelines next_ccp;
static PFN_vkCreateShaderModule next_csm;
static PFN_vkGetPipelineExecutablePropertiesKHR next_props;  // NULL: the device has no statistics to give
static PFN_vkGetPipelineExecutableStatisticsKHR next_stats;
static PFN_vkCreatePipelineCache next_cpc;
static PFN_vkGetPipelineCacheData next_gpcd;
static PFN_vkDestroyPipelineCache next_dpc;
static PFN_vkDestroyPipeline next_dp;
static VkInstance last_instance;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int npipelines, nmodules;

static FILE *out_file(void) {  // opened per line: the reader may look at the file between pipelines
  const char *path = getenv("VKSTATS_OUT");
  return path ? fopen(path, "a") : NULL;
}

static void put_string(FILE *f, const char *s) {  // a JSON string (the driver's names are plain ASCII)
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fputc('"', f);
}

static VKAPI_ATTR VkResult VKAPI_CALL create_instance(const VkInstanceCreateInfo *ci, const VkAllocationCallbacks *a,
                                                      VkInstance *inst) {
  VkLayerInstanceCreateInfo *link = (VkLayerInstanceCreateInfo *)ci->pNext;
  while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO && link->function == VK_LAYER_LINK_INFO))
    link = (VkLayerInstanceCreateInfo *)link->pNext;
  if (!link) return VK_ERROR_INITIALIZATION_FAILED;
  next_gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  link->u.pLayerInfo = link->u.pLayerInfo->pNext;  // the next layer finds its own link
  PFN_vkCreateInstance create = (PFN_vkCreateInstance)next_gipa(VK_NULL_HANDLE, "vkCreateInstance");
  VkResult r = create(ci, a, inst);
  if (r == VK_SUCCESS) last_instance = *inst;
  return r;
}

static int driver_has_extension(VkPhysicalDevice pd) {
  PFN_vkEnumerateDeviceExtensionProperties list =
      (PFN_vkEnumerateDeviceExtensionProperties)next_gipa(last_instance, "vkEnumerateDeviceExtensionProperties");
  uint32_t n = 0;
  list(pd, NULL, &n, NULL);
  VkExtensionProperties *ext = calloc(n, sizeof *ext);
  list(pd, NULL, &n, ext);
  int found = 0;
  for (uint32_t i = 0; i < n; i++) found |= !strcmp(ext[i].extensionName, EXT);
  free(ext);
  return found;
}

static VKAPI_ATTR VkResult VKAPI_CALL create_device(VkPhysicalDevice pd, const VkDeviceCreateInfo *ci,
                                                    const VkAllocationCallbacks *a, VkDevice *dev) {
  VkLayerDeviceCreateInfo *link = (VkLayerDeviceCreateInfo *)ci->pNext;
  while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO && link->function == VK_LAYER_LINK_INFO))
    link = (VkLayerDeviceCreateInfo *)link->pNext;
  if (!link) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  next_gdpa = link->u.pLayerInfo->pfnNextGetDeviceProcAddr;
  link->u.pLayerInfo = link->u.pLayerInfo->pNext;
  PFN_vkCreateDevice create = (PFN_vkCreateDevice)gipa(VK_NULL_HANDLE, "vkCreateDevice");
  int supported = driver_has_extension(pd);
  VkDeviceCreateInfo info = *ci;
  const char **names = malloc((ci->enabledExtensionCount + 1) * sizeof *names);
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR feature = {
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR, (void *)ci->pNext, VK_TRUE};
  if (supported) {  // the application's extensions and features, and this one
    memcpy(names, ci->ppEnabledExtensionNames, ci->enabledExtensionCount * sizeof *names);
    names[info.enabledExtensionCount++] = EXT;
    info.ppEnabledExtensionNames = names;
    info.pNext = &feature;
  }
  VkResult r = create(pd, &info, a, dev);
  free(names);
  if (r != VK_SUCCESS) return r;
  next_ccp = (PFN_vkCreateComputePipelines)next_gdpa(*dev, "vkCreateComputePipelines");
  next_csm = (PFN_vkCreateShaderModule)next_gdpa(*dev, "vkCreateShaderModule");
  next_cpc = (PFN_vkCreatePipelineCache)next_gdpa(*dev, "vkCreatePipelineCache");
  next_gpcd = (PFN_vkGetPipelineCacheData)next_gdpa(*dev, "vkGetPipelineCacheData");
  next_dpc = (PFN_vkDestroyPipelineCache)next_gdpa(*dev, "vkDestroyPipelineCache");
  next_dp = (PFN_vkDestroyPipeline)next_gdpa(*dev, "vkDestroyPipeline");
  next_props = supported ? (PFN_vkGetPipelineExecutablePropertiesKHR)next_gdpa(*dev, "vkGetPipelineExecutablePropertiesKHR") : NULL;
  next_stats = supported ? (PFN_vkGetPipelineExecutableStatisticsKHR)next_gdpa(*dev, "vkGetPipelineExecutableStatisticsKHR") : NULL;
  if (!next_stats) next_props = NULL;
  FILE *f = out_file();
  if (f) {
    fprintf(f, "{\"device\": 1, \"supported\": %d}\n", next_props != NULL);
    fclose(f);
  }
  return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL create_shader_module(VkDevice d, const VkShaderModuleCreateInfo *ci,
                                                           const VkAllocationCallbacks *a, VkShaderModule *m) {
  const char *dir = getenv("VKSTATS_SPIRV_DIR");
  if (dir) {
    char path[4096];
    pthread_mutex_lock(&lock);
    snprintf(path, sizeof path, "%s/mod%04d.spv", dir, nmodules++);
    pthread_mutex_unlock(&lock);
    FILE *f = fopen(path, "wb");
    if (f) {
      fwrite(ci->pCode, 1, ci->codeSize, f);
      fclose(f);
    }
  }
  return next_csm(d, ci, a, m);
}

static void put_statistic(FILE *f, const VkPipelineExecutableStatisticKHR *s) {
  put_string(f, s->name);
  switch (s->format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: fprintf(f, ": %u", s->value.b32); break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: fprintf(f, ": %lld", (long long)s->value.i64); break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
      fprintf(f, ": %llu", (unsigned long long)s->value.u64);
      break;
    default: fprintf(f, ": %.17g", s->value.f64);
  }
}

static void report(VkDevice d, VkPipeline p) {
  VkPipelineInfoKHR info = {VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, NULL, p};
  uint32_t n = 0;
  if (next_props(d, &info, &n, NULL) != VK_SUCCESS) return;
  VkPipelineExecutablePropertiesKHR *props = calloc(n, sizeof *props);
  for (uint32_t e = 0; e < n; e++) props[e].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR;
  next_props(d, &info, &n, props);
  int id = npipelines++;
  FILE *f = out_file();
  for (uint32_t e = 0; f && e < n; e++) {
    VkPipelineExecutableInfoKHR exe = {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, NULL, p, e};
    uint32_t ns = 0;
    next_stats(d, &exe, &ns, NULL);
    VkPipelineExecutableStatisticKHR *st = calloc(ns, sizeof *st);
    for (uint32_t s = 0; s < ns; s++) st[s].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
    next_stats(d, &exe, &ns, st);
    fprintf(f, "{\"pipeline\": %d, \"executable\": ", id);
    put_string(f, props[e].name);
    fprintf(f, ", \"subgroup\": %u, \"stats\": {", props[e].subgroupSize);
    for (uint32_t s = 0; s < ns; s++) {
      fputs(s ? ", " : "", f);
      put_statistic(f, &st[s]);
    }
    fputs("}}\n", f);
    free(st);
  }
  if (f) fclose(f);
  free(props);
}

// $VKSTATS_CACHE_DIR: each pipeline compiled once more into a pipeline cache of its own, whose data (the driver's
// compiled form, in its own container) is written there as pipeNNNN.bin
static void dump_cache(VkDevice d, const VkComputePipelineCreateInfo *ci, const VkAllocationCallbacks *a, int id) {
  const char *dir = getenv("VKSTATS_CACHE_DIR");
  if (!dir) return;
  VkPipelineCacheCreateInfo cci = {VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO, NULL, 0, 0, NULL};
  VkPipelineCache cache;
  if (next_cpc(d, &cci, a, &cache) != VK_SUCCESS) return;
  VkPipeline p;
  if (next_ccp(d, cache, 1, ci, a, &p) == VK_SUCCESS) {
    next_dp(d, p, a);
    size_t size = 0;
    next_gpcd(d, cache, &size, NULL);
    void *data = malloc(size);
    char path[4096];
    snprintf(path, sizeof path, "%s/pipe%04d.bin", dir, id);
    FILE *f = fopen(path, "wb");
    if (data && f && next_gpcd(d, cache, &size, data) == VK_SUCCESS) fwrite(data, 1, size, f);
    if (f) fclose(f);
    free(data);
  }
  next_dpc(d, cache, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL create_compute_pipelines(VkDevice d, VkPipelineCache cache, uint32_t n,
                                                               const VkComputePipelineCreateInfo *ci,
                                                               const VkAllocationCallbacks *a, VkPipeline *p) {
  if (!next_props) return next_ccp(d, cache, n, ci, a, p);
  VkComputePipelineCreateInfo *info = malloc(n * sizeof *info);
  memcpy(info, ci, n * sizeof *info);
  for (uint32_t i = 0; i < n; i++) info[i].flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  VkResult r = next_ccp(d, cache, n, info, a, p);
  free(info);
  if (r == VK_SUCCESS) {
    pthread_mutex_lock(&lock);
    for (uint32_t i = 0; i < n; i++) {
      dump_cache(d, &ci[i], a, npipelines);
      report(d, p[i]);
    }
    pthread_mutex_unlock(&lock);
  }
  return r;
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkstats_GetDeviceProcAddr(VkDevice d, const char *name) {
  if (!strcmp(name, "vkCreateComputePipelines")) return (PFN_vkVoidFunction)create_compute_pipelines;
  if (!strcmp(name, "vkCreateShaderModule")) return (PFN_vkVoidFunction)create_shader_module;
  if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)vkstats_GetDeviceProcAddr;
  return next_gdpa(d, name);
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkstats_GetInstanceProcAddr(VkInstance inst, const char *name) {
  if (!strcmp(name, "vkCreateInstance")) return (PFN_vkVoidFunction)create_instance;
  if (!strcmp(name, "vkCreateDevice")) return (PFN_vkVoidFunction)create_device;
  if (!strcmp(name, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)vkstats_GetInstanceProcAddr;
  if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)vkstats_GetDeviceProcAddr;
  if (!strcmp(name, "vkCreateComputePipelines")) return (PFN_vkVoidFunction)create_compute_pipelines;
  if (!strcmp(name, "vkCreateShaderModule")) return (PFN_vkVoidFunction)create_shader_module;
  return next_gipa(inst, name);
}
