// Workspace tools. Each tool is a module under src/ with its own entry script.
export {};
