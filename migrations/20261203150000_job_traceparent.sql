-- The trace context (W3C traceparent) of the delivery a forwarding job was
-- made from, when traces are exported: each attempt's span joins that trace
-- and sends it on. NULL when traces are off. Adding a nullable column
-- without a default rewrites nothing.
ALTER TABLE destination_jobs ADD COLUMN traceparent text;
