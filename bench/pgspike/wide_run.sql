-- Claim and complete every task 50 at a time on the wide row alone (run.sh).
SET search_path = sp;
DO $$
DECLARE s bigint[]; i int; t0 timestamptz; tc interval := '0'; tu interval := '0'; tf interval := '0';
BEGIN
 FOR i IN 1..400 LOOP
  t0 := clock_timestamp();
  SELECT array_agg(seq) INTO s FROM (SELECT seq FROM tasks WHERE tenant='default' AND task_type='bench' AND state='queued' ORDER BY priority DESC, seq LIMIT 50 FOR UPDATE SKIP LOCKED) c;
  tc := tc + (clock_timestamp() - t0); t0 := clock_timestamp();
  UPDATE tasks t SET state='leased', lease_id='lease-01JQZ' || lpad(t.seq::text,21,'0') || '.' || t.id, worker_id='bench.1', leased_at=1764600100000000, lease_expires_at=1764600400000000,
    attempts=attempts+1, lease_count=lease_count+1, version=version+1, updated_at=1764600100000000, started_at=1764600100000000, accepted_at=1764600100000000, accept_receipt='R-acc' || t.seq
    WHERE t.seq = ANY(s);
  tu := tu + (clock_timestamp() - t0); t0 := clock_timestamp();
  UPDATE tasks t SET state='succeeded', completed_at=1764600200000000, result='{"pointer":"inline:eA==","summary":"","checksum":"sha256:abababababababababababababababababababababababababababababababab"}', version=version+1, updated_at=1764600200000000,
    lease_expires_at=NULL
    WHERE t.seq = ANY(s);
  tf := tf + (clock_timestamp() - t0);
  COMMIT;
 END LOOP;
 RAISE NOTICE 'per task: claim read % us, claim update % us, completion % us', round(extract(epoch from tc)*1e6/20000,1), round(extract(epoch from tu)*1e6/20000,1), round(extract(epoch from tf)*1e6/20000,1);
END $$;
