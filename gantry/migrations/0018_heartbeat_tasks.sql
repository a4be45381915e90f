-- The heartbeat row also says how many tasks the event loop holds (NULL: not counted), so a
-- long run's task count can be watched from outside without a port (bench/soak.py).
ALTER TABLE heartbeat ADD COLUMN tasks INTEGER;
