// Workspace tools. Each tool is a module under src/ with its own entry script.
export { writeModel, planModel, WEIGHT_RECIPE_VERSION } from './models/build';
export type { WriteModelOptions, WriteModelResult } from './models/build';
export { PRESETS, getPreset } from './models/presets';
export type { Preset } from './models/presets';
