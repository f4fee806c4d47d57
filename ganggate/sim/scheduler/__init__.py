"""kubesim's default scheduler, laid out as pkg/scheduler: the queue (backend/queue), the cache
(backend/cache), one scheduling cycle (schedule_one.go), the filter and score plugins (framework/plugins)
and preemption (framework/plugins/defaultpreemption). An HTTP client of the API server.
"""
