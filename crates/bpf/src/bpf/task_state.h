/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A task's state as /proc shows it, for every program that reports one: taskdiag.bpf.c (BASE's
 * state letter) and crates/profile's profile.bpf.c (the root frame of an off-CPU sample). Needs
 * vmlinux_min.h and bpf_core_read.h first.
 */
#ifndef TASKDIAG_TASK_STATE_H
#define TASKDIAG_TASK_STATE_H

#define TASK_REPORT 0x7f
#define TASK_REPORT_IDLE 0x80
#define TASK_IDLE 0x402
#define TASK_RTLOCK_WAIT 0x1000
#define TASK_FROZEN 0x8000

/* task_state_index() from include/linux/sched.h: the index into "RSDTtXZPI" of raw state @st
 * and exit state @exit_state. */
static __always_inline __u8 state_index_of(__u32 st, __u32 exit_state)
{
	__u32 state;
	int i;

	state = (st | exit_state) & TASK_REPORT;
	if ((st & TASK_IDLE) == TASK_IDLE)
		state = TASK_REPORT_IDLE;
	if ((st & TASK_RTLOCK_WAIT) || (st & TASK_FROZEN))
		state = 2; /* TASK_UNINTERRUPTIBLE */
	/* fls() of a value below 0x100, without branches (each would be a verifier path). */
	i = 0;
	i += (state >= 0x01);
	i += (state >= 0x02);
	i += (state >= 0x04);
	i += (state >= 0x08);
	i += (state >= 0x10);
	i += (state >= 0x20);
	i += (state >= 0x40);
	i += (state >= 0x80);
	return i;
}

/* task_state_index() of @t, read with plain loads (a trusted pointer: an iterator's task). */
static __always_inline __u8 state_index(struct task_struct *t)
{
	__u32 st;

	if (bpf_core_field_exists(t->__state)) {
		st = t->__state;
	} else {
		struct task_struct___pre514 *o = (void *)t;
		st = (__u32)o->state;
	}
	return state_index_of(st, (__u32)t->exit_state);
}

#endif /* TASKDIAG_TASK_STATE_H */
