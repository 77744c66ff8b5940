/* The compiled-in engines. Availability is decided at run time by ->probe(), never by #ifdef. */
#include <string.h>

#include "engine.h"

const struct iodl_engine_ops *const iodl_engines[] = {
	&iodl_engine_null,
	&iodl_engine_psync,
	&iodl_engine_aio,
	&iodl_engine_uring,
	NULL,
};

const struct iodl_engine_ops *iodl_engine_find(const char *name)
{
	for (const struct iodl_engine_ops *const *e = iodl_engines; *e; e++)
		if (!strcmp((*e)->name, name))
			return *e;
	return NULL;
}

/* Like fio's check_engine_ops(): refuse a table the core cannot drive. NULL when fine. */
const char *iodl_check_engine_ops(const struct iodl_engine_ops *ops)
{
	if (ops->version != IODL_OPS_VERSION)
		return "ops version mismatch";
	if (!ops->name || !ops->probe || !ops->init || !ops->queue || !ops->cleanup)
		return "missing name, probe, init, queue or cleanup";
	if (ops->flags & IODL_ENG_SYNC)
		return NULL;	/* sync engines complete inside ->queue() */
	if (!ops->commit || !ops->getevents || !ops->event)
		return "async engine without commit, getevents or event";
	return NULL;
}
