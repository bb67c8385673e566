/*
 * The table of devices this build has (include/libra/device.h). Adding a device is
 * a folder under src/device/ with its struct device_ops, and one line here.
 */
#include "libra/device.h"

#include <string.h>

#include "libra/device_cpu.h"
#include "libra/device_emu.h"

static const struct device_ops *const table[] = {
    &device_emu,
    &device_cpu,
    &device_cuda,
};

const struct device_ops *device_find(const char *name)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i]->name, name) == 0) return table[i];
    return NULL;
}

const char *device_names(void) { return "emu, cpu, cuda"; }
