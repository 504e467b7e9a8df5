-- The dashboard's page as `mend serve` takes it (mend.listen.dashboard_page, in the mend
-- program, where mend.serve is): a page holding no whole script, as the browser's HTML parser
-- finds scripts, would be a blank dashboard with nothing said; it is not served, and stderr
-- says so naming the file. The installed page (ui/index.html) is served, with nothing said.
local H = require "spec.helper"

local q, sh = H.quote, H.shell

-- What `mend repl` prints running the Lua `code`, stderr with it.
local function in_mend(dir, code)
  local script = H.write_file(dir, "page.lua", code .. "\n")
  return sh(("timeout 20 %s repl < %s"):format(H.MEND, q(script)))
end

describe("the dashboard's page", function()
  after_each(function() H.cleanup() end)

  it("is not served, and stderr names it, when it holds no whole script", function()
    local dir = H.tmp_dir()
    local pages = {
      cut = "<html><script>var x = 1;\n",                               -- the file cut short
      commented = "<!-- <script>go()</script>",                         -- a comment never closed
      quoted = "<script data-x=\"a>go()</script>",                      -- a quote never closed
    }
    for name, text in pairs(pages) do
      local file = H.write_file(dir, name .. ".html", text)
      local rc, out = in_mend(dir,
        ("print('page', require('mend.listen').dashboard_page(%q))"):format(file))
      assert.are.equal(0, rc, out)
      assert.matches("\npage\tnil\n", "\n" .. out)
      local said = "mend: warning: the dashboard's page " .. file .. " holds no whole <script>"
      assert.truthy(out:find(said, 1, true), out)
    end
  end)

  -- In <svg> or <math> the browser reads comments, CDATA and a script's text by other rules:
  -- a policy made by the HTML rules could allow text that is no script there, or block one
  it("is not served, and stderr says why, when it holds an <svg> or <math> element", function()
    local dir = H.tmp_dir()
    for name, text in pairs {
      svg = "<svg><style><!--</style><script>x()</script>--></style></svg><script>go()</script>",
      math = "<script>go()</script><MATH><mi>x</mi></MATH>",
    } do
      local file = H.write_file(dir, name .. ".html", text)
      local rc, out = in_mend(dir,
        ("print('page', require('mend.listen').dashboard_page(%q))"):format(file))
      assert.are.equal(0, rc, out)
      assert.matches("\npage\tnil\n", "\n" .. out)
      local said = "mend: warning: the dashboard's page " .. file .. " holds an <svg> or <math> element"
      assert.truthy(out:find(said, 1, true), out)
    end
  end)

  it("is served as installed, with nothing said", function()
    local dir = H.tmp_dir()
    local rc, out = in_mend(dir, "p = require('mend.listen').dashboard_page()\n" ..
                                 "print('page', type(p), require('mend.serve').scripts(p))")
    assert.are.equal(0, rc, out)
    assert.matches("\npage\tstring\t1\tfalse\n", "\n" .. out)
    assert.is_nil(out:find("warning", 1, true), out)
  end)
end)
