/* engine/layers/profile.h — where the forward's wall time goes, per part.
 *
 * Owns: the profile counters the layer loop and the blocks add to while profiling is on
 * (df_model_profile_enable), and the clock they read. Does not own: the switch (engine/model.h).
 */
#ifndef DF_ENGINE_LAYERS_PROFILE_H
#define DF_ENGINE_LAYERS_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Wall time per part of the forward, accumulated while profiling is on (seconds). */
typedef struct df_model_profile {
  double attention; /* the token mixer (q/k/v/o projections, norms, RoPE, attention) */
  double router;    /* gate linear, softmax/top-k, grouping */
  double experts;   /* routed experts through the expert backend */
  double combine;   /* weighting and summing the expert outputs */
  double dense_mlp; /* dense SwiGLU layers and shared experts */
  double lm_head;   /* final norm and lm_head */
  double embed;     /* embedding lookup */
  double residual;  /* the residual scheme: each sublayer's input (its RMSNorm; Attention
                       Residuals' mixes and snapshots) and the folding of its output into
                       the stream, and the output mix before the final norm */
  int64_t forwards, tokens;
} df_model_profile;

/* Monotonic clock in seconds. */
static inline double df_prof_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* With profiling on, adds the time since *t0 to *acc and restarts the clock at now. */
static inline void df_prof_lap(bool on, double *acc, double *t0) {
  if (!on) return;
  double t = df_prof_now();
  *acc += t - *t0;
  *t0 = t;
}

#endif
