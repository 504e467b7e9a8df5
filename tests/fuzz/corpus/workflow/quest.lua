-- A quest as a saga, run by examples/game_loop.c: accept the quest, spawn its monster (the
-- game answers a few frames later, and now and then says the zone is full: a retryable error
-- with the game's advice on when to come back), fight it, grant the reward. A player whose
-- inventory is full gets a fatal error from grant_reward: the saga then turns back, despawns
-- the monster and abandons the quest, in that order.
--
-- Input: { player = 17, quest = "rats", zone = "cellar" }
local mend = require "mend"

return {
  name = "quest",
  retry = { max_attempts = 8, initial = 0.05, multiplier = 2, max_delay = 0.25 },
  steps = {
    { name = "accept",
      execute = function(ctx, input)
        return { player = input.player, quest = input.quest }
      end,
      compensate = function(ctx, accepted)
        mend.call("abandon_quest", accepted.player, accepted.quest)
      end },

    { name = "spawn",   -- answered by the game's frame loop, not at once
      execute = function(ctx, input)
        return mend.call("spawn_monster", input.zone, ctx.idempotency_key)
      end,
      compensate = function(ctx, monster)
        mend.call("despawn_monster", monster.id)
      end },

    { name = "fight",
      timeout = 2,
      execute = function(ctx, input)
        local monster = ctx.results.spawn
        local hp, rounds = monster.hp, 0
        while hp > 0 do
          hp = hp - (5 + (rounds * 7 + input.player) % 9)
          rounds = rounds + 1
        end
        mend.sleep(0.05)   -- the fight takes a moment of game time; other quests go on
        return { rounds = rounds }
      end },

    { name = "reward",
      execute = function(ctx, input)
        local gold = 10 * ctx.results.fight.rounds
        return mend.call("grant_reward", input.player, gold)
      end },
  },
}
