-- wrk script: prints the 99.9th percentile (microseconds) and the share of requests that took
-- 50 ms or more (in the balancing bench: the requests the slow upstream served).
done = function(summary, latency, requests)
   io.write(string.format("p99.9 %d\n", latency:percentile(99.9)))
   if latency.max < 50000 then
      io.write("slow_share 0\n")
      return
   end
   -- wrk exposes percentiles, not a histogram: find where the latency crosses 50 ms.
   local lo, hi = 0.0, 100.0
   for _ = 1, 40 do
      local mid = (lo + hi) / 2
      if latency:percentile(mid) >= 50000 then hi = mid else lo = mid end
   end
   io.write(string.format("slow_share %.6f\n", (100.0 - hi) / 100.0))
end
