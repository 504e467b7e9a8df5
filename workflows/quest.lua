-- A quest that waits for the world: accept it (the player gets the quest item), wait up to 7
-- days for the boss to be killed, then grant the reward. If the week passes first, the wait
-- fails with a `timeout` error and the saga turns back: the quest item is taken back.
--
--   id=$(mend start quest --input '{"player":17,"quest":"rats"}' --key quest-17-rats)
--   mend worker &                                          -- the run waits: mend status $id
--   mend signal $id boss_killed --data '{"by":17,"gold":50}' --key kill-1
--   mend signal --run-key quest-17-rats boss_killed ...    -- the same, by the quest's own key
--
-- While it waits the run holds no coroutine, and no worker needs to be running: the event is
-- kept in the run's inbox and taken by whichever worker carries the run on. In the REPL, on
-- the virtual clock, `advance(7 * 86400)` lets the week pass at once.
--
-- Input: { player = 17, quest = "rats" }

return {
  name = "quest",

  steps = {
    { name = "accept",
      execute = function(ctx, input)
        ctx:log("player %s accepts quest %s and gets its item", input.player, input.quest)
        return { player = input.player, quest = input.quest, item = input.quest .. "-map" }
      end,
      compensate = function(ctx, accepted)
        ctx:log("quest %s expired: %s taken back from player %s", accepted.quest, accepted.item,
                accepted.player)
      end },

    -- Waits instead of executing; the event's payload is this step's result.
    { name = "kill", wait_for = "boss_killed", timeout = 7 * 86400 },

    { name = "reward",
      execute = function(ctx, input)
        local kill = ctx.results.kill or {}
        local gold = kill.gold or 10
        ctx:log("player %s is granted %d gold for quest %s", input.player, gold, input.quest)
        return { gold = gold }
      end },
  },
}
