export { buildProgram, runCli } from './main';
