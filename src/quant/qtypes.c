#include "quant/qtypes.h"

#include <stdio.h>
#include <strings.h>

static const qt_traits k_traits[QT_COUNT] = {
    [QT_F32] = {"F32", 1, 4, 0, 1, QT_F32},
    [QT_F16] = {"F16", 1, 2, 0, 1, QT_F16},
    [QT_BF16] = {"BF16", 1, 2, 0, 1, QT_BF16},
    [QT_Q4_0] = {"Q4_0", 32, 18, 1, 1, QT_Q8_0},
    [QT_Q4_1] = {"Q4_1", 32, 20, 1, 1, QT_Q8_1},
    [QT_Q5_0] = {"Q5_0", 32, 22, 1, 1, QT_Q8_0},
    [QT_Q5_1] = {"Q5_1", 32, 24, 1, 1, QT_Q8_1},
    [QT_Q8_0] = {"Q8_0", 32, 34, 1, 1, QT_Q8_0},
    [QT_Q8_1] = {"Q8_1", 32, 36, 1, 0, QT_Q8_1},
    [QT_Q2_K] = {"Q2_K", 256, 84, 1, 1, QT_Q8_K},
    [QT_Q3_K] = {"Q3_K", 256, 110, 1, 1, QT_Q8_K},
    [QT_Q4_K] = {"Q4_K", 256, 144, 1, 1, QT_Q8_K},
    [QT_Q5_K] = {"Q5_K", 256, 176, 1, 1, QT_Q8_K},
    [QT_Q6_K] = {"Q6_K", 256, 210, 1, 1, QT_Q8_K},
    [QT_Q8_K] = {"Q8_K", 256, 292, 1, 0, QT_Q8_K},
    [QT_IQ4_NL] = {"IQ4_NL", 32, 18, 1, 1, QT_Q8_0},
    [QT_IQ4_XS] = {"IQ4_XS", 256, 136, 1, 1, QT_Q8_K},
};

static const char *const k_all_names[QT_COUNT] = {
    "F32", "F16", "Q4_0", "Q4_1", "Q4_2(retired)", "Q4_3(retired)", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
    "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
    "Q4_0_4_4(retired)", "Q4_0_4_8(retired)", "Q4_0_8_8(retired)", "TQ1_0", "TQ2_0",
    "IQ4_NL_4_4(retired)", "IQ4_NL_4_8(retired)", "IQ4_NL_8_8(retired)", "MXFP4", "NVFP4", "Q1_0",
    "Q2_0",
};

const qt_traits *qt_traits_of(uint32_t type)
{
    if (type >= QT_COUNT || k_traits[type].name == NULL) return NULL;
    return &k_traits[type];
}

const char *qt_type_name(uint32_t type)
{
    static _Thread_local char buf[24];
    if (type < QT_COUNT) return k_all_names[type];
    snprintf(buf, sizeof buf, "type%u", type);
    return buf;
}

int qt_type_from_name(const char *name)
{
    for (int i = 0; i < QT_COUNT; i++)
        if (k_traits[i].name && strcasecmp(k_traits[i].name, name) == 0) return i;
    return -1;
}
