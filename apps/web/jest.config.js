// Component tests (app/**) and the end-to-end test (e2e/**: kail serve + Chromium; needs the
// builds, see project.json's test target).
module.exports = require('../../jest.preset.js')(__dirname, {
  testMatch: ['<rootDir>/app/**/*.spec.tsx', '<rootDir>/app/**/*.spec.ts', '<rootDir>/e2e/**/*.e2e.spec.ts'],
});
