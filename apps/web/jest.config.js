module.exports = require('../../jest.preset.js')(__dirname, { testMatch: ['<rootDir>/app/**/*.spec.tsx', '<rootDir>/app/**/*.spec.ts'] });
