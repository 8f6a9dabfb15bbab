// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The memory-map iterator's own cost (row B7, mode `vma-floor`): visits every mapping of every
 * process as taskdiag's dump_vma does, counts them and writes nothing.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

__u64 floor_vmas = 0;

SEC("iter/task_vma")
int walk_vma_floor(struct bpf_iter__task_vma *ctx)
{
	if (ctx->vma)
		floor_vmas++;
	return 0;
}
