/* Force-included into llama.cpp's Vulkan backend by scripts/llama-backends.cmake.
 *
 * ggml-vulkan.cpp chains VK_EXT_layer_settings' create-info into every instance it makes (the
 * validation layer's settings; used only in builds with GGML_VULKAN_VALIDATE). Vulkan headers older
 * than 1.3.272 (Debian 12 ships 1.3.239) lack the extension, and that one block stops the build.
 * Where the headers lack it, these are its types with the registry's layout and structure type:
 * what the driver receives is the same bytes a newer header would give, and drivers skip extension
 * structures they do not know. Headers that have the extension define VK_EXT_layer_settings and
 * build untouched. */
#pragma once
#include <vulkan/vulkan_core.h>
#ifndef VK_EXT_layer_settings
#include <cstdint>
#include <vector>

namespace vk {
enum class LayerSettingTypeEXT : int32_t {
    eBool32 = 0, eInt32 = 1, eInt64 = 2, eUint32 = 3, eUint64 = 4, eFloat32 = 5, eFloat64 = 6, eString = 7
};

struct LayerSettingEXT {
    LayerSettingEXT(const char *layer, const char *setting, LayerSettingTypeEXT kind, uint32_t count,
                    const void *values)
        : pLayerName(layer), pSettingName(setting), type(kind), valueCount(count), pValues(values) {}
    const char *pLayerName;
    const char *pSettingName;
    LayerSettingTypeEXT type;
    uint32_t valueCount;
    const void *pValues;
};

struct LayerSettingsCreateInfoEXT {
    explicit LayerSettingsCreateInfoEXT(const std::vector<LayerSettingEXT> &settings)
        : settingCount(static_cast<uint32_t>(settings.size())), pSettings(settings.data()) {}
    VkStructureType sType = static_cast<VkStructureType>(1000496000);  /* ..._LAYER_SETTINGS_CREATE_INFO_EXT */
    const void *pNext = nullptr;
    uint32_t settingCount;
    const LayerSettingEXT *pSettings;
};
}  // namespace vk
#endif
