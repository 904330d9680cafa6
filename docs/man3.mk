# Section 3 pages of the library functions, one per function or group;
# the other names of a group are .so link pages.  Include from docs/local.mk:
#   include docs/man3.mk
# (ml_bound_*.3, memlimits.3 and memlimits.1 are listed elsewhere.)  The
# installed pages are configure's copies in docs/gen/, with the version in
# their footers (configure.ac lists them; the sources in docs/ are shipped as
# its inputs).
man_MANS += \
	docs/gen/ml_allocator.3 \
	docs/gen/ml_capabilities.3 \
	docs/gen/ml_check.3 \
	docs/gen/ml_cleanup_pop.3 \
	docs/gen/ml_cleanup_push.3 \
	docs/gen/ml_default_delivery.3 \
	docs/gen/ml_frame_name.3 \
	docs/gen/ml_global_limit.3 \
	docs/gen/ml_global_memory_limit.3 \
	docs/gen/ml_global_memory_usage.3 \
	docs/gen/ml_is_interrupted.3 \
	docs/gen/ml_is_masked.3 \
	docs/gen/ml_limit_allocations.3 \
	docs/gen/ml_limit_global_memory.3 \
	docs/gen/ml_limit_with_token.3 \
	docs/gen/ml_mask.3 \
	docs/gen/ml_note_alloc.3 \
	docs/gen/ml_note_alloc_block.3 \
	docs/gen/ml_note_free.3 \
	docs/gen/ml_note_free_block.3 \
	docs/gen/ml_patch_objects.3 \
	docs/gen/ml_run.3 \
	docs/gen/ml_sample_interval.3 \
	docs/gen/ml_set_default_delivery.3 \
	docs/gen/ml_set_frame_source.3 \
	docs/gen/ml_set_global_limit.3 \
	docs/gen/ml_set_global_memory_limit.3 \
	docs/gen/ml_set_pressure_callback.3 \
	docs/gen/ml_set_refusal_guard.3 \
	docs/gen/ml_set_sample_interval.3 \
	docs/gen/ml_set_seed.3 \
	docs/gen/ml_set_stack_capture.3 \
	docs/gen/ml_shared_create.3 \
	docs/gen/ml_shared_join.3 \
	docs/gen/ml_shared_leave.3 \
	docs/gen/ml_shared_limit.3 \
	docs/gen/ml_shared_members.3 \
	docs/gen/ml_shared_set_wake.3 \
	docs/gen/ml_shared_usage.3 \
	docs/gen/ml_status_str.3 \
	docs/gen/ml_task_allocated.3 \
	docs/gen/ml_task_current.3 \
	docs/gen/ml_task_describe.3 \
	docs/gen/ml_task_enter.3 \
	docs/gen/ml_task_free.3 \
	docs/gen/ml_task_held.3 \
	docs/gen/ml_task_leave.3 \
	docs/gen/ml_task_new.3 \
	docs/gen/ml_task_run.3 \
	docs/gen/ml_task_status.3 \
	docs/gen/ml_token_free.3 \
	docs/gen/ml_token_is_set.3 \
	docs/gen/ml_token_new.3 \
	docs/gen/ml_token_set.3 \
	docs/gen/ml_unmask.3 \
	docs/gen/ml_version.3 \
	docs/gen/ml_write_held_profile.3 \
	docs/gen/ml_write_metrics.3
