"""The bounded picture of the engine the UI draws: EngineState, the timeline that replays StepRecords onto it, the StepSource interface. No torch."""
