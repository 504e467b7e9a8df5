-- A quest as a saga, run by examples/game_loop.c for each player: accept the quest (the player
-- gets its map), spawn the quest's monster (the game answers a few frames later, and now and
-- then says the zone is full: a retryable error with the game's advice on when to come back),
-- wait for the player to slay it (an event the game sends with mend_engine_signal when its
-- simulation says so), then grant the reward (answered by the game's next frame). A player
-- whose inventory is full gets a fatal error from grant_reward: the saga then turns back,
-- despawns the monster and abandons the quest, in that order. A monster nobody slays within
-- a minute of game time fails the wait (a timeout), and the saga turns back the same way.
--
-- Input: { player = 17, quest = "rats", zone = "cellar" }
local mend = require "mend"

return {
  name = "quest",
  retry = { max_attempts = 8, initial = 0.05, multiplier = 2, max_delay = 0.25 },
  steps = {
    { name = "accept",
      execute = function(ctx, input)
        return { player = input.player, quest = input.quest, item = input.quest .. "-map" }
      end,
      compensate = function(ctx, accepted)
        mend.call("abandon_quest", accepted.player, accepted.quest)
      end },

    { name = "spawn",   -- answered by the game's frame loop, not at once
      -- "zone full" is the game's normal answer one time in ten, not an outage: five in a
      -- row (the default) would hold every quest's spawn for half a minute and more
      breaker = { failure_threshold = 50 },
      execute = function(ctx, input)
        return mend.call("spawn_monster", input.player, input.zone, ctx.idempotency_key)
      end,
      compensate = function(ctx, monster)
        mend.call("despawn_monster", monster.id)
      end },

    -- The player's fight is the game's: its end arrives as an event, whose payload is this
    -- step's result.
    { name = "slay", wait_for = "monster_slain", timeout = 60 },

    { name = "reward",
      execute = function(ctx, input)
        local gold = 10 * (ctx.results.slay.rounds or 1)
        return mend.call("grant_reward", input.player, gold)
      end },
  },
}
