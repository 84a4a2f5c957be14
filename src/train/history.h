// history.h - checkpoint.keep: step-numbered checkpoints beside last.safetensors.
//
// step-<step, 8 digits>.safetensors is a hard link to the last.safetensors just written (the next write
// of last renames a new file over it, so the link keeps this one): no second write, no second copy on
// disk. The oldest step files beyond `keep` are removed.
#ifndef AMPTRAIN_HISTORY_H
#define AMPTRAIN_HISTORY_H

#include <stddef.h>

// The step file's path for `step` in dir.
void history_path(char *out, size_t cap, const char *dir, long step);
// Links last (a file in dir) as the step file of `step`, replacing one of that step. Returns 0, or -1
// with errno when the file system refuses hard links (the caller then writes the step file itself).
int history_link(const char *dir, const char *last, long step);
// Removes the step files of dir beyond the newest `keep`. Returns how many it removed.
int history_prune(const char *dir, int keep);

#endif
