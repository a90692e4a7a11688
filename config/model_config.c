/* config/model_config.c — placeholder; see model_config.h. */
