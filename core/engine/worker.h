/*
 * worker.h - the async step thread of a model (worker.c): the engine side of glm53_model_submit and friends.
 */
#ifndef GLM53_ENGINE_WORKER_H
#define GLM53_ENGINE_WORKER_H

#include "core/engine/model.h"

/* Stops the model's worker if it has one: queued steps complete as cancelled (GLM53_ERR_INVALID_ARG, their
 * sequences released), the running one finishes, the thread is joined and its descriptor closed. */
void glm53_worker_stop(glm53_model *model);

#endif /* GLM53_ENGINE_WORKER_H */
