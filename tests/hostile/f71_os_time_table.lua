-- expect: needs_attention step exceeded its instruction budget
-- os.time of a table calls mktime, which (TZ unset, glibc) reads /etc/localtime's state again
-- with a stat at each call: some 1-3 us of CPU, charged the loop's few instructions (5.6 s of
-- CPU, 10.7 s of wall time, under the corpus's budget of 10M: bound 186 ms).
return { name = "f71_os_time_table", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = { year = 2020, month = 1, day = 1, hour = 0 }
  while true do os.time(t) end
end } } }
