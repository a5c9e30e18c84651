-- Claim on the queue row, complete by deleting it and finishing the task row (run.sh).
SET search_path = sp;
DO $$
DECLARE s bigint[]; i int; t0 timestamptz; tc interval := '0'; tu interval := '0'; tf interval := '0'; td interval := '0';
BEGIN
 FOR i IN 1..400 LOOP
  t0 := clock_timestamp();
  SELECT array_agg(seq) INTO s FROM (SELECT seq FROM queue WHERE tenant='default' AND task_type='bench' AND state='queued' ORDER BY priority DESC, seq LIMIT 50 FOR UPDATE SKIP LOCKED) c;
  tc := tc + (clock_timestamp() - t0); t0 := clock_timestamp();
  UPDATE queue t SET state='leased', lease_id='lease-01JQZ' || lpad(t.seq::text,21,'0') || '.T-01JQZ' || lpad(t.seq::text, 21, '0'), worker_id='bench.1', leased_at=1764600100000000, lease_expires_at=1764600400000000,
    attempts=attempts+1, lease_count=lease_count+1, version=version+1
    WHERE t.seq = ANY(s);
  tu := tu + (clock_timestamp() - t0); t0 := clock_timestamp();
  DELETE FROM queue WHERE seq = ANY(s);
  td := td + (clock_timestamp() - t0); t0 := clock_timestamp();
  UPDATE tasks t SET state='succeeded', completed_at=1764600200000000, result='{"pointer":"inline:eA==","summary":"","checksum":"sha256:abababababababababababababababababababababababababababababababab"}', version=version+1, updated_at=1764600200000000,
    attempts=1, lease_count=1, worker_id='bench.1', started_at=1764600100000000, accepted_at=1764600100000000
    WHERE t.seq = ANY(s);
  tf := tf + (clock_timestamp() - t0);
  COMMIT;
 END LOOP;
 RAISE NOTICE 'per task: claim read % us, claim update % us, queue delete % us, completion % us', round(extract(epoch from tc)*1e6/20000,1), round(extract(epoch from tu)*1e6/20000,1), round(extract(epoch from td)*1e6/20000,1), round(extract(epoch from tf)*1e6/20000,1);
END $$;
