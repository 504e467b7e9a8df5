-- expect: failed cannot encode a string that is not valid UTF-8
-- Keys and values that are not UTF-8 cannot be JSON: a clear failure, not a broken row.
return { name = "c25_result_bad_utf8", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  return { ["\xff\xfe"] = "\xc0" }
end } } }
