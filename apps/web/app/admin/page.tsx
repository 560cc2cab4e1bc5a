import { AdminView } from './admin-view';

export const metadata = { title: 'Keys · KailStream' };

export default function AdminPage() {
  return <AdminView />;
}
