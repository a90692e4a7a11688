/* engine/safetensors.c — placeholder; see safetensors.h. */
