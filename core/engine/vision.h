/*
 * vision.h - internal: the vision tower's weights live beside the text model (struct glm53_model.vision), loaded
 * with it when the config has a vision_config (core/vision.c). glm53_model_encode_vision (glm53.h) runs it.
 */
#ifndef GLM53_VISION_H
#define GLM53_VISION_H

#include "core/engine/model.h"

typedef struct glm53_vision glm53_vision;

/* Loads model.visual.* from m->ckpt onto m->be into m->vision (every tensor named in a failure). */
glm53_status glm53_vision_load(glm53_model *m);
/* Frees m->vision (NULL allowed) and the device copies it owns. */
void         glm53_vision_free(glm53_model *m);

#endif /* GLM53_VISION_H */
